package egress

import (
	"net/netip"
	"unsafe"

	"golang.org/x/sys/unix"
)

// getOriginalDst reads SO_ORIGINAL_DST (netfilter's, IPv4) of a socket.
func getOriginalDst(fd int) (netip.AddrPort, error) {
	var sa unix.RawSockaddrInet4
	size := uint32(unsafe.Sizeof(sa))
	_, _, errno := unix.Syscall6(unix.SYS_GETSOCKOPT, uintptr(fd), unix.SOL_IP, unix.SO_ORIGINAL_DST,
		uintptr(unsafe.Pointer(&sa)), uintptr(unsafe.Pointer(&size)), 0)
	if errno != 0 {
		return netip.AddrPort{}, errno
	}
	b := (*[2]byte)(unsafe.Pointer(&sa.Port)) // network byte order
	port := uint16(b[0])<<8 | uint16(b[1])
	return netip.AddrPortFrom(netip.AddrFrom4(sa.Addr), port), nil
}
