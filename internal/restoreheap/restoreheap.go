// Package restoreheap prepares the heap a restarting node's restore is
// about to fill.
//
// A restore writes the whole state into memory the new process has never
// touched, and does it as the heap grows from nothing. Two costs follow
// that decoding does not have (docs/design.md, "The data dir and
// durability"):
//
//   - each first touch of a 4 KiB page is a page fault, slow on virtual
//     machines: where the host's transparent huge pages are on only for
//     memory that asks for them (the "madvise" mode, the usual default),
//     Prepare grows the heap by the expected size, marks that room for
//     huge pages and gives it back to the runtime, which carves the
//     restore's allocations out of it, one fault per 2 MiB;
//   - a heap that doubles from a few MiB is collected at each doubling,
//     marking everything restored so far each time: Prepare holds the
//     collector off until the heap reaches the expected size (as a soft
//     memory limit, so it still collects past it), and release puts the
//     process's settings back.
package restoreheap

import (
	"bytes"
	"os"
	"runtime/debug"
	"runtime/metrics"
	"strings"
)

// Result is what Prepare did, for the node's log.
type Result struct {
	// Mode is the host's transparent huge page mode ("always", "madvise",
	// "never"), or "" where there is none (not Linux, or no such file).
	Mode string
	// Advised is the bytes of heap marked for huge pages, or zero.
	Advised int64
	// Err is why the heap could not be marked, where it was tried.
	Err error
}

// Prepare readies the heap for a restore expected to fill about n more
// bytes (at most a quarter of the machine's memory): huge pages where the
// host gives them on request, and no collection until the process holds
// n bytes more than it does now (nor past a memory limit already set).
// Call release when the restore is done, whatever its outcome.
func Prepare(n int64) (Result, func()) {
	n = min(n, memoryQuarter())
	if n < minHold {
		return advise(n), func() {}
	}
	// The collector is off while the room is taken too: otherwise the
	// heap's growth by the room's pieces sets off a collection at each
	// doubling.
	gc := debug.SetGCPercent(-1)
	r := advise(n)
	limit := debug.SetMemoryLimit(-1)
	debug.SetMemoryLimit(min(limit, inUse()+n))
	return r, func() {
		debug.SetGCPercent(gc)
		debug.SetMemoryLimit(limit)
	}
}

// minHold is the least restore worth holding the collector for.
const minHold = 16 << 20

// inUse is the memory the runtime holds that counts against a memory
// limit: all it mapped less what it gave back.
func inUse() int64 {
	s := []metrics.Sample{{Name: "/memory/classes/total:bytes"}, {Name: "/memory/classes/heap/released:bytes"}}
	metrics.Read(s)
	return int64(s[0].Value.Uint64() - s[1].Value.Uint64())
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
