//go:build linux

package restoreheap

import (
	"math"
	"runtime"
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
		room := make([]byte, roomPiece)
		rooms = append(rooms, room)
		// The whole huge pages inside the piece.
		off := int64((hugePage - uintptr(unsafe.Pointer(unsafe.SliceData(room)))%hugePage) % hugePage)
		size := (roomPiece - off) / hugePage * hugePage
		if err := unix.Madvise(room[off:off+size], unix.MADV_HUGEPAGE); err != nil {
			r.Err = err
			return r
		}
		r.Advised += size
	}
	rooms = nil
	runtime.GC()
	return r
}

// roomPiece is the size of each piece of advise's room.
const roomPiece = 4 << 20
