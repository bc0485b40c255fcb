//go:build !linux

package restoreheap

import "math"

func memoryQuarter() int64 { return math.MaxInt64 }

// advise does nothing where there are no transparent huge pages.
func advise(n int64) Result { return Result{} }
