package member

import (
	"net"
	"syscall"

	"golang.org/x/sys/unix"
)

// unread reports whether c's socket holds bytes received from the peer
// that this process has not read yet: the peer answered, and this
// process, starved of CPU, has not got round to reading it.
func unread(c net.Conn) bool {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return false
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return false
	}
	n := 0
	if err := raw.Control(func(fd uintptr) { n, _ = unix.IoctlGetInt(int(fd), unix.SIOCINQ) }); err != nil {
		return false
	}
	return n > 0
}
