package loadgen

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strings"
)

// ErrNotLoopback is returned for a target outside the loopback range.
var ErrNotLoopback = errors.New("loadgen: target is not a loopback address (127.0.0.0/8, ::1, localhost); load is only sent to this machine unless -allow-remote is given")

// CheckLoopback accepts "host:port" targets whose host is "localhost", an
// address in 127.0.0.0/8 or ::1 (IPv4-mapped forms included). It resolves
// no names: any other host name is refused.
func CheckLoopback(addr string) error {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("loadgen: target %q: %w", addr, err)
	}
	if port == "" {
		return fmt.Errorf("loadgen: target %q has no port", addr)
	}
	if strings.EqualFold(host, "localhost") {
		return nil
	}
	ip, err := netip.ParseAddr(host)
	if err != nil || !ip.Unmap().IsLoopback() {
		return fmt.Errorf("%w: %q", ErrNotLoopback, addr)
	}
	return nil
}
