//go:build !unix

package state

import "os"

// mapFile maps nothing where there is no mmap: snapshots are read.
func mapFile(*os.File) *fileMap { return nil }
