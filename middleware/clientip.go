package middleware

import (
	"net/netip"

	"github.com/slidelimit/slidelimit/internal/lifecycle"
)

// CanonicalizeIP returns the subject under which requests from addr are
// counted: an IPv4 address (IPv4-mapped IPv6 addresses included) as itself,
// as in "192.0.2.7", and an IPv6 address as its enclosing network of
// ipv6Prefix bits, as in "2001:db8:1:2::/64". A zone is dropped. An
// ipv6Prefix outside 1..128 is treated as 128, counting single addresses.
// It returns "" for the zero Addr.
func CanonicalizeIP(addr netip.Addr, ipv6Prefix int) string {
	return lifecycle.CanonicalizeIP(addr, ipv6Prefix)
}
