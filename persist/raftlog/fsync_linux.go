package raftlog

import (
	"errors"
	"os"
	"syscall"
)

// fdatasync flushes f's data and the metadata needed to read it back (its
// size), not its timestamps: one flush per append on ext4 and xfs.
func fdatasync(f *os.File) error { return syscall.Fdatasync(int(f.Fd())) }

// fallocate gives f disk space for [off, off+n), extending it to cover the
// range; the space reads as zeros. ok is false when the file system cannot
// allocate space ahead of writes.
func fallocate(f *os.File, off, n int64) (ok bool, err error) {
	err = syscall.Fallocate(int(f.Fd()), 0, off, n)
	if errors.Is(err, syscall.EOPNOTSUPP) || errors.Is(err, syscall.ENOSYS) {
		return false, nil
	}
	return true, err
}
