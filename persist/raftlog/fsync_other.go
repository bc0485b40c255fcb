//go:build !linux

package raftlog

import "os"

func fdatasync(f *os.File) error { return f.Sync() }

// fallocate: space cannot be allocated ahead of writes here.
func fallocate(f *os.File, off, n int64) (ok bool, err error) { return false, nil }
