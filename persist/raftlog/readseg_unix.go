//go:build unix

package raftlog

import (
	"os"
	"syscall"
)

// readSegment maps the file at path read-only: Open reads each segment
// once, whole, and a mapping costs neither a copy nor a fresh buffer the
// size of the segment. done unmaps it; the bytes must not be used after.
func readSegment(path string) (b []byte, done func(), err error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, nil, err
	}
	if fi.Size() == 0 {
		return nil, func() {}, nil
	}
	b, err = syscall.Mmap(int(f.Fd()), 0, int(fi.Size()), syscall.PROT_READ, syscall.MAP_SHARED)
	if err != nil {
		// Not every file system maps files: read it instead.
		b, err = os.ReadFile(path)
		return b, func() {}, err
	}
	return b, func() { _ = syscall.Munmap(b) }, nil
}
