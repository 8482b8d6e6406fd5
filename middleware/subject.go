package middleware

import (
	"errors"
	"fmt"
	"net/netip"
	"strconv"

	"github.com/slidelimit/slidelimit/internal/lifecycle"
	"github.com/slidelimit/slidelimit/rules"
)

// Subject returns the subject under which the middleware built with opts
// counts value in the windows of a limiter of kind, so that tools such as
// an admin endpoint find the windows of "alice" or "192.0.2.7" without
// knowing the prefixes or the canonicalization:
//
//   - rules.IP: value is a client address ("192.0.2.7", "::ffff:192.0.2.7",
//     "2001:db8::1") and is canonicalized as CanonicalizeIP does with the
//     WithIPv6Prefix of opts; the canonical network itself
//     ("2001:db8:1:2::/64", as found in logs) is accepted too.
//   - rules.User, rules.Header, rules.Param, rules.Key: value is the user
//     id, header value, path value or key. It must not be empty: the
//     middleware counts an empty value by client IP, so ask for the IP's
//     subject (Subject(rules.IP, addr)) with the limiter instead.
//   - rules.Global: value is ignored; there is one subject per scope.
//
// Only the options that change subjects matter (WithIPv6Prefix); the
// others are accepted so that callers can pass the options they gave New.
// Subject fails with an error matching ErrSubject for a value the
// middleware never counts under kind, and with the options' errors if any
// option is invalid. Peers that are not IP addresses (Unix sockets) have no
// subject here.
func Subject(kind rules.Kind, value string, opts ...Option) (string, error) {
	c := defaultConfig()
	for _, o := range opts {
		if o != nil {
			o(&c)
		}
	}
	if len(c.errs) > 0 {
		return "", errors.Join(c.errs...)
	}
	switch kind {
	case rules.IP:
		canon, err := canonicalIPText(value, c.ipv6Prefix)
		if err != nil {
			return "", err
		}
		return lifecycle.SubjectOf(rules.IP, canon), nil
	case rules.Global:
		return lifecycle.SubjectOf(rules.Global, ""), nil
	case rules.User, rules.Header, rules.Param, rules.Key:
		if value == "" {
			return "", fmt.Errorf("%w: empty %s value (the middleware counts it by client IP; ask for the IP's subject)", ErrSubject, kind)
		}
		return lifecycle.SubjectOf(kind, value), nil
	}
	return "", fmt.Errorf("%w: unknown limiter kind %q", ErrSubject, string(kind))
}

// canonicalIPText parses an address, or an IPv6 network of the configured
// length, and returns its canonical form.
func canonicalIPText(s string, v6bits int) (string, error) {
	if a, err := netip.ParseAddr(s); err == nil {
		return CanonicalizeIP(a, v6bits), nil
	}
	p, err := netip.ParsePrefix(s)
	if err != nil {
		return "", fmt.Errorf("%w: %q is not an IP address", ErrSubject, s)
	}
	if v6bits < 1 || v6bits > 128 {
		v6bits = 128 // as CanonicalizeIP treats it
	}
	if a := p.Addr(); a.Is4() || a.Is4In6() || p.Bits() != v6bits {
		return "", fmt.Errorf("%w: %q is not an IP address or an IPv6 /%s network, by which clients are counted",
			ErrSubject, s, strconv.Itoa(v6bits))
	}
	return CanonicalizeIP(p.Addr(), v6bits), nil
}
