package middleware

import (
	"errors"
	"fmt"
	"net/netip"
	"strconv"

	"github.com/slidelimit/slidelimit/internal/lifecycle"
	"github.com/slidelimit/slidelimit/rules"
)

// Subject returns the subject under which middleware built with opts counts
// value in the windows of a rule of kind, as engine.Check takes it:
//
//   - rules.IP: value is a client address, canonicalized as CanonicalizeIP
//     does with the WithIPv6Prefix of opts; the canonical network itself
//     ("2001:db8:1:2::/64", as found in logs) is accepted too.
//   - rules.User, rules.Header, rules.Param, rules.Key: value is the user
//     id, header value, path value or key; not empty, which the middleware
//     counts by client IP.
//   - rules.Global: value is ignored; there is one subject per scope.
//
// It fails for a value the middleware never counts under kind, and with
// the options' errors.
func Subject(kind rules.Kind, value string, opts ...Option) (string, error) {
	c := configOf(opts)
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
			return "", fmt.Errorf("%w: empty %s value (the middleware counts it by client IP; ask for the IP's subject)", lifecycle.ErrSubject, kind)
		}
		return lifecycle.SubjectOf(kind, value), nil
	}
	return "", fmt.Errorf("%w: unknown limiter kind %q", lifecycle.ErrSubject, string(kind))
}

// canonicalIPText parses an address, or an IPv6 network of the configured
// length, and returns its canonical form.
func canonicalIPText(s string, v6bits int) (string, error) {
	if a, err := netip.ParseAddr(s); err == nil {
		return CanonicalizeIP(a, v6bits), nil
	}
	p, err := netip.ParsePrefix(s)
	if err != nil {
		return "", fmt.Errorf("%w: %q is not an IP address", lifecycle.ErrSubject, s)
	}
	if v6bits < 1 || v6bits > 128 {
		v6bits = 128 // as CanonicalizeIP treats it
	}
	if a := p.Addr(); a.Is4() || a.Is4In6() || p.Bits() != v6bits {
		return "", fmt.Errorf("%w: %q is not an IP address or an IPv6 /%s network, by which clients are counted",
			lifecycle.ErrSubject, s, strconv.Itoa(v6bits))
	}
	return CanonicalizeIP(p.Addr(), v6bits), nil
}
