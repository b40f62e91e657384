//go:build !linux

package egress

import (
	"errors"
	"net/netip"
)

func getOriginalDst(fd int) (netip.AddrPort, error) {
	return netip.AddrPort{}, errors.New("transparent proxying needs Linux")
}
