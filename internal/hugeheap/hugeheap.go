// Package hugeheap asks the kernel to back the heap a restarting node is
// about to fill with huge pages.
//
// A node's restore writes every byte of its state into memory the process
// has never touched, and each first touch of a 4 KiB page is a page fault:
// on virtual machines whose faults are slow, the faults cost more than
// the decoding (docs/design.md, "The data dir and durability"). Where
// transparent huge pages are on only for memory that asks for them (the
// "madvise" mode, the usual default), Advise grows the heap by a given size, marks that
// room for huge pages and gives it back to the runtime, which then carves
// the restore's allocations out of it: one fault per 2 MiB instead of one
// per 4 KiB. Where the mode is "always" there is nothing to ask, and
// where it is "never" nothing to gain.
package hugeheap

import (
	"bytes"
	"os"
	"strings"
)

// Result is what Advise did, for the node's log.
type Result struct {
	// Mode is the host's transparent huge page mode ("always", "madvise",
	// "never"), or "" where there is none (not Linux, or no such file).
	Mode string
	// Advised is the bytes of heap marked for huge pages, or zero.
	Advised int64
	// Err is why Advise could not mark them, where it tried.
	Err error
}

// hugePage is the size of a transparent huge page where Linux has them
// with 4 KiB base pages (amd64, and arm64 as usually built).
const hugePage = 2 << 20

// enabledFile holds the host's mode.
const enabledFile = "/sys/kernel/mm/transparent_hugepage/enabled"

// Mode returns the host's transparent huge page mode, or "".
func Mode() string { return modeOf(enabledFile) }

// modeOf reads the bracketed word of a mode file ("always [madvise]
// never" is madvise).
func modeOf(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	i := bytes.IndexByte(b, '[')
	j := bytes.IndexByte(b, ']')
	if i < 0 || j < i {
		return ""
	}
	return strings.TrimSpace(string(b[i+1 : j]))
}
