//go:build !linux

package zerocopy

import "net"

// Wrap returns c unchanged. The copies this package avoids are those of unix-socket
// connections to the agent, which the local provider makes on Linux only; elsewhere (the
// Docker provider on macOS or Windows) the agent is reached over TCP, whose connections have
// their own zero-copy path in net/http.
func Wrap(c net.Conn) net.Conn { return c }
