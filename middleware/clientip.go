package middleware

import (
	"net/netip"

	"github.com/slidelimit/slidelimit/internal/lifecycle"
)

// DefaultIPv6Prefix is the prefix length by which IPv6 clients are grouped
// unless WithIPv6Prefix says otherwise. A /64 is the smallest network an ISP
// normally hands to one subscriber, who can use any of its 2^64 addresses;
// counting single addresses would let one client rotate through them.
const DefaultIPv6Prefix = lifecycle.DefaultIPv6Prefix

// ProxyHeader names the request header from which the client address is
// read when the peer is a trusted proxy.
type ProxyHeader = lifecycle.ProxyHeader

// Proxy headers. Configure the one your proxies write: a proxy that appends
// to X-Forwarded-For passes a client's own Forwarded header through
// untouched, so believing the other header would let clients spoof it.
const (
	// XForwardedFor is the de facto X-Forwarded-For list of addresses,
	// each proxy appending the address of its peer.
	XForwardedFor = lifecycle.XForwardedFor
	// Forwarded is the RFC 7239 Forwarded header; its for= parameters are
	// read.
	Forwarded = lifecycle.Forwarded
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
