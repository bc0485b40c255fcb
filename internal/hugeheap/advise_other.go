//go:build !linux

package hugeheap

// Advise does nothing where there are no transparent huge pages.
func Advise(n int64) Result { return Result{} }
