package raftlog

import (
	"errors"
	"os"
	"syscall"
)

// fdatasync flushes f's data and the metadata needed to read it back (its
// size), not its timestamps: one flush per append on ext4 and xfs.
func fdatasync(f *os.File) error { return syscall.Fdatasync(int(f.Fd())) }

// preallocate gives f disk space for [off, off+n) and extends it to cover
// it; the space reads as zeros.
func preallocate(f *os.File, off, n int64) error {
	err := syscall.Fallocate(int(f.Fd()), 0, off, n)
	if errors.Is(err, syscall.EOPNOTSUPP) {
		return nil // the file grows as it is written instead
	}
	return err
}
