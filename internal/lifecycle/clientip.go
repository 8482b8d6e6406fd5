package lifecycle

import (
	"net/netip"
	"strings"

	"github.com/slidelimit/slidelimit/rules"
)

// DefaultIPv6Prefix is the prefix length by which IPv6 clients are grouped
// unless WithIPv6Prefix says otherwise. A /64 is the smallest network an ISP
// normally hands to one subscriber, who can use any of its 2^64 addresses;
// counting single addresses would let one client rotate through them.
const DefaultIPv6Prefix = 64

// ProxyHeader names the request header from which the client address is
// read when the peer is a trusted proxy.
type ProxyHeader uint8

// Proxy headers. Configure the one your proxies write: a proxy that appends
// to X-Forwarded-For passes a client's own Forwarded header through
// untouched, so believing the other header would let clients spoof it.
const (
	// XForwardedFor is the de facto X-Forwarded-For list of addresses,
	// each proxy appending the address of its peer.
	XForwardedFor ProxyHeader = iota
	// Forwarded is the RFC 7239 Forwarded header; its for= parameters are
	// read.
	Forwarded
)

// String returns the header's canonical name.
func (h ProxyHeader) String() string {
	if h == Forwarded {
		return "Forwarded"
	}
	return "X-Forwarded-For"
}

// CanonicalizeIP returns the subject under which requests from addr are
// counted: an IPv4 address (IPv4-mapped IPv6 addresses included) as itself,
// as in "192.0.2.7", and an IPv6 address as its enclosing network of
// ipv6Prefix bits, as in "2001:db8:1:2::/64". A zone is dropped. An
// ipv6Prefix outside 1..128 is treated as 128, counting single addresses.
// It returns "" for the zero Addr.
func CanonicalizeIP(addr netip.Addr, ipv6Prefix int) string {
	if !addr.IsValid() {
		return ""
	}
	addr = addr.Unmap().WithZone("")
	if addr.Is4() {
		return addr.String()
	}
	if ipv6Prefix < 1 || ipv6Prefix >= 128 {
		return addr.String()
	}
	p, err := addr.Prefix(ipv6Prefix)
	if err != nil {
		return addr.String() // unreachable: addr is IPv6 and the length is in range
	}
	return p.String()
}

// ClientIP decides which address is a request's client's, and its
// subject. It is immutable and safe for concurrent use.
type ClientIP struct {
	// Trusted are the proxies whose proxy header is believed.
	Trusted []netip.Prefix
	// Header is the proxy header they write.
	Header ProxyHeader
	// V6Bits is the prefix length by which IPv6 clients are grouped.
	V6Bits int
}

// Subject returns the subject of the client address of a request from
// peer with header h (nil: none): "ip:" and its canonical form, or
// "peer:" and peer when peer is not an IP address.
func (c *ClientIP) Subject(peer string, h HeaderValues) string {
	if h == nil {
		h = noValues{}
	}
	a, raw, ok := c.addr(peer, h)
	if !ok {
		return subjectPeer + raw
	}
	return SubjectOf(rules.IP, CanonicalizeIP(a, c.V6Bits))
}

type noValues struct{}

func (noValues) Values(string) []string { return nil }

// isTrusted reports whether a is the address of a trusted proxy. The zone
// of a link-local address is ignored, as it is in WithTrustedProxies:
// netip.Prefix.Contains never matches an address with a zone.
func (c *ClientIP) isTrusted(a netip.Addr) bool {
	a = a.Unmap().WithZone("")
	for _, p := range c.Trusted {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// HeaderValues is what the client-address logic reads of a request's
// header: every value of the named field. http.Header implements it; a
// transport with other metadata (gRPC's metadata.MD) adapts it.
type HeaderValues interface {
	Values(name string) []string
}

// addr returns the client address of a request from peer (for net/http,
// r.RemoteAddr) with header h. The peer is the client unless it is a
// trusted proxy; then the proxy header is read from the right, skipping
// trusted proxies, and the first other address is the client's. Reading
// from the right matters: every entry left of the last one a trusted proxy
// wrote may have been sent by the client. h is read only for a trusted
// peer.
//
// ok is false when peer is not an IP address (a Unix socket, or a handler
// test that left r.RemoteAddr empty); raw then holds it for a subject of
// last resort.
func (c *ClientIP) addr(peerAddr string, h HeaderValues) (a netip.Addr, raw string, ok bool) {
	peer, ok := parseHostPort(peerAddr)
	if !ok {
		return netip.Addr{}, peerAddr, false
	}
	if len(c.Trusted) == 0 || !c.isTrusted(peer) {
		return peer, "", true
	}
	hops := h.Values(c.Header.String())
	// last is the nearest trusted hop seen so far: if the chain runs out or
	// holds something that is not an address, it is the best we know and it
	// cannot be chosen by the client.
	last := peer
	for i := len(hops) - 1; i >= 0; i-- {
		line := hops[i]
		for line != "" {
			var elem string
			line, elem = cutLast(line, c.Header == Forwarded)
			var hop netip.Addr
			var valid bool
			if c.Header == Forwarded {
				hop, valid = forwardedFor(elem)
			} else {
				hop, valid = parseHostPort(strings.TrimSpace(elem))
			}
			if !valid {
				return last, "", true
			}
			if !c.isTrusted(hop) {
				return hop, "", true
			}
			last = hop
		}
	}
	return last, "", true
}

// cutLast splits s at its last list separator (a comma outside quotes when
// quoted is true) and returns what precedes it and the last element.
func cutLast(s string, quoted bool) (rest, elem string) {
	if !quoted {
		i := strings.LastIndexByte(s, ',')
		if i < 0 {
			return "", s
		}
		return s[:i], s[i+1:]
	}
	// A quoted-string may hold commas, so scan from the left to know which
	// commas are separators; Forwarded values are short in practice.
	sep := -1
	in := false
	for i := 0; i < len(s); i++ {
		switch {
		case in && s[i] == '\\':
			i++
		case s[i] == '"':
			in = !in
		case !in && s[i] == ',':
			sep = i
		}
	}
	if in {
		// An unterminated quote comes from the client (a proxy appending
		// its element would have written balanced quotes): without this,
		// it would swallow the elements our proxies appended after it.
		return cutLast(s, false)
	}
	if sep < 0 {
		return "", s
	}
	return s[:sep], s[sep+1:]
}

// forwardedFor returns the address in the for= parameter of one RFC 7239
// forwarded-element, such as `for=192.0.2.60;proto=http` or
// `for="[2001:db8::17]:4711"`. Obfuscated identifiers and "unknown" are not
// addresses.
func forwardedFor(elem string) (netip.Addr, bool) {
	for pair := range strings.SplitSeq(elem, ";") {
		k, v, ok := strings.Cut(strings.TrimSpace(pair), "=")
		if !ok || !strings.EqualFold(k, "for") {
			continue
		}
		if len(v) >= 2 && v[0] == '"' && v[len(v)-1] == '"' {
			v = strings.ReplaceAll(v[1:len(v)-1], `\`, "")
		}
		return parseHostPort(v)
	}
	return netip.Addr{}, false
}

// parseHostPort parses an address with or without a port: "192.0.2.1",
// "192.0.2.1:80", "2001:db8::1", "[2001:db8::1]" or "[2001:db8::1]:80".
func parseHostPort(s string) (netip.Addr, bool) {
	// Only "[v6]:port" and "v4:port" have a port; trying ParseAddrPort on
	// anything else would allocate an error on the hot path.
	if len(s) > 0 && s[0] == '[' && s[len(s)-1] != ']' || strings.Count(s, ":") == 1 {
		ap, err := netip.ParseAddrPort(s)
		if err != nil {
			return netip.Addr{}, false
		}
		return ap.Addr(), true
	}
	if len(s) >= 2 && s[0] == '[' && s[len(s)-1] == ']' {
		s = s[1 : len(s)-1]
	}
	a, err := netip.ParseAddr(s)
	if err != nil {
		return netip.Addr{}, false
	}
	return a, true
}

// ParseTrusted parses a trusted proxy given as a CIDR prefix ("10.0.0.0/8")
// or a single address ("192.0.2.1"). Host bits of a prefix are cleared and
// IPv4-mapped forms are unmapped so that Contains matches unmapped peers.
func ParseTrusted(s string) (netip.Prefix, error) {
	s = strings.TrimSpace(s)
	if strings.Contains(s, "/") {
		p, err := netip.ParsePrefix(s)
		if err != nil {
			return netip.Prefix{}, err
		}
		if p.Addr().Is4In6() && p.Bits() >= 96 {
			p = netip.PrefixFrom(p.Addr().Unmap(), p.Bits()-96)
		}
		return p.Masked(), nil
	}
	a, err := netip.ParseAddr(s)
	if err != nil {
		return netip.Prefix{}, err
	}
	a = a.Unmap().WithZone("")
	return netip.PrefixFrom(a, a.BitLen()), nil
}
