//go:build !linux

package transport

import "syscall"

// peekOpen cannot look without waiting here; a connection the server has
// closed fails its next call, which goes again on a new connection when
// it may.
func peekOpen(syscall.RawConn) bool { return true }
