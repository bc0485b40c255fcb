//go:build unix

package netio

import "syscall"

// fdLimit is the process's RLIMIT_NOFILE soft limit: how many file
// descriptors it may hold open.
func fdLimit() (uint64, error) {
	var r syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &r); err != nil {
		return 0, err
	}
	return uint64(r.Cur), nil
}
