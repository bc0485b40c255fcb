package transport

import "syscall"

// peekOpen looks at the socket without waiting or consuming: open when
// nothing is there to read yet (EAGAIN), closed at end of stream, on an
// error, or when the server sent something no call asked for.
func peekOpen(rc syscall.RawConn) bool {
	open := false
	var buf [1]byte
	err := rc.Read(func(fd uintptr) bool {
		_, _, err := syscall.Recvfrom(int(fd), buf[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		open = err == syscall.EAGAIN || err == syscall.EWOULDBLOCK
		return true
	})
	return err == nil && open
}
