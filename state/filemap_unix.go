//go:build unix

package state

import (
	"os"
	"runtime"
	"syscall"
)

// mapFile maps f whole, copy-on-write, or returns nil where it cannot.
func mapFile(f *os.File) *fileMap {
	fi, err := f.Stat()
	if err != nil || fi.Size() == 0 || fi.Size() != int64(int(fi.Size())) {
		return nil
	}
	b, err := syscall.Mmap(int(f.Fd()), 0, int(fi.Size()), syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_PRIVATE)
	if err != nil {
		return nil
	}
	m := &fileMap{b: b}
	runtime.AddCleanup(m, func(b []byte) { _ = syscall.Munmap(b) }, b)
	return m
}
