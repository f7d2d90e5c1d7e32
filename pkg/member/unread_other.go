//go:build !linux

package member

import "net"

// unread reports whether c's socket holds bytes received and not read
// yet; it cannot tell on this platform, and reports false.
func unread(net.Conn) bool { return false }
