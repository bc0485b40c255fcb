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
func advise(n int64) Result {
	r := Result{Mode: Mode()}
	if r.Mode != "madvise" || n < 2*hugePage {
		return r
	}
	room := make([]byte, n)
	// The whole huge pages inside the room.
	off := int64((hugePage - uintptr(unsafe.Pointer(unsafe.SliceData(room)))%hugePage) % hugePage)
	size := (n - off) / hugePage * hugePage
	if err := unix.Madvise(room[off:off+size], unix.MADV_HUGEPAGE); err != nil {
		r.Err = err
		return r
	}
	r.Advised = size
	room = nil
	runtime.GC()
	return r
}
