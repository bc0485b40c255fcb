//go:build linux

package restoreheap

import (
	"cmp"
	"math"
	"runtime"
	"slices"
	"unsafe"

	"golang.org/x/sys/unix"
)

// memoryQuarter is a quarter of the machine's memory.
func memoryQuarter() int64 {
	var si unix.Sysinfo_t
	if err := unix.Sysinfo(&si); err != nil {
		return math.MaxInt64
	}
	return int64(si.Totalram) * int64(si.Unit) / 4
}

// advise marks about n bytes of fresh heap for huge pages when the
// host's mode is madvise. The room is reserved, not touched: only what
// the process then uses becomes resident. It collects garbage once, to
// give the room back to the runtime.
//
// The room is taken in pieces of roomPiece: the runtime clears an
// allocation whole when any page of it was used before, which for one
// large room would touch all of it, at a page fault per 4 KiB; a piece
// that lands on used pages is cleared alone, and those pages are resident
// already.
func advise(n int64) Result {
	r := Result{Mode: Mode()}
	if r.Mode != "madvise" || n < 2*hugePage {
		return r
	}
	rooms := make([][]byte, 0, n/roomPiece+1)
	for got := int64(0); got < n; got += roomPiece {
		rooms = append(rooms, make([]byte, roomPiece))
	}
	// Pieces side by side are marked as one range: a piece alone holds
	// one whole huge page where it is not aligned to one.
	for _, run := range adjacent(rooms) {
		last := run[len(run)-1]
		start := uintptr(unsafe.Pointer(unsafe.SliceData(run[0])))
		end := uintptr(unsafe.Pointer(unsafe.SliceData(last))) + uintptr(len(last))
		from := (start + hugePage - 1) / hugePage * hugePage
		to := end / hugePage * hugePage
		if to <= from {
			continue
		}
		// The run spans several allocations: it is marked by address.
		if _, _, errno := unix.Syscall(unix.SYS_MADVISE, from, to-from, unix.MADV_HUGEPAGE); errno != 0 {
			r.Err = errno
			return r
		}
		r.Advised += int64(to - from)
	}
	runtime.KeepAlive(rooms)
	rooms = nil
	runtime.GC()
	return r
}

// adjacent groups the pieces into runs of pieces that follow one another
// in memory, each run in address order.
func adjacent(pieces [][]byte) [][][]byte {
	addr := func(b []byte) uintptr { return uintptr(unsafe.Pointer(unsafe.SliceData(b))) }
	slices.SortFunc(pieces, func(a, b []byte) int { return cmp.Compare(addr(a), addr(b)) })
	var runs [][][]byte
	for i, p := range pieces {
		if i > 0 && addr(pieces[i-1])+uintptr(len(pieces[i-1])) == addr(p) {
			runs[len(runs)-1] = append(runs[len(runs)-1], p)
			continue
		}
		runs = append(runs, [][]byte{p})
	}
	return runs
}

// roomPiece is the size of each piece of advise's room.
const roomPiece = 4 << 20
