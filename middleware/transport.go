package middleware

import (
	"errors"
	"net/http"
	"net/netip"
	"time"

	"github.com/slidelimit/slidelimit/engine"
	"github.com/slidelimit/slidelimit/role"
	"github.com/slidelimit/slidelimit/rules"
)

// This file exports the parts of the middleware that do not depend on
// net/http — subjects, client addresses, the advertised policies and their
// field values, the never-early retry delay — for other transports such as
// gRPC (contrib/grpclimit), so that every transport answers alike from one
// implementation.

// RetryAfterSeconds is the delay a denial advertises for an engine wait d
// (engine.Decision.RetryAfter), in whole seconds: rounded up and at least
// 1, so that a client that waits it is never early and one that would
// retry at once is told to wait. It is the Retry-After value of the
// middleware's 429 and 503 responses.
func RetryAfterSeconds(d time.Duration) int64 { return retryAfterSeconds(d) }

// subjectFor is the one mapping from a limiter of kind to its subject, for
// a request by user (counted by IP when byIP) whose value for the limiter
// (a header value, path value or key) is v. It returns "" when the request
// is counted by its client address instead.
func subjectFor(kind rules.Kind, user string, byIP bool, v string) string {
	switch kind {
	case rules.IP:
		return ""
	case rules.User:
		if byIP {
			return ""
		}
		return subjectOf(rules.User, user)
	}
	return subjectOf(kind, v)
}

// subject returns the subject of the client address of a request from
// peer with header h: "ip:" and its canonical form, or "peer:" and peer
// when peer is not an IP address.
func (c *clientIP) subject(peer string, h HeaderValues, v6bits int) string {
	a, raw, ok := c.addr(peer, h)
	if !ok {
		return subjectPeer + raw
	}
	return subjectOf(rules.IP, CanonicalizeIP(a, v6bits))
}

// trustedPrefixes parses the WithTrustedProxies entries of c.
func (c *config) trustedPrefixes() ([]netip.Prefix, []error) {
	var ps []netip.Prefix
	var errs []error
	for _, s := range c.trusted {
		p, err := parseTrusted(s)
		if err != nil {
			errs = append(errs, &ConfigError{Option: "WithTrustedProxies", Value: s, Reason: "not an IP address or CIDR prefix"})
			continue
		}
		ps = append(ps, p)
	}
	return ps, errs
}

// ClientIP finds the client address of requests as the middleware does
// (see the Subjects section of the package documentation), for transports
// that read the peer address and the proxy header themselves. It is
// immutable and safe for concurrent use.
type ClientIP struct {
	ip     clientIP
	v6bits int
}

// NewClientIP returns the client-address logic configured by
// WithTrustedProxies, WithProxyHeader and WithIPv6Prefix among opts, with
// the same defaults as New: no trusted proxy, X-Forwarded-For, /64. Other
// options are ignored. It fails with the options' errors.
func NewClientIP(opts ...Option) (*ClientIP, error) {
	c := defaultConfig()
	for _, o := range opts {
		if o != nil {
			o(&c)
		}
	}
	trusted, errs := c.trustedPrefixes()
	if errs = append(c.errs, errs...); len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return &ClientIP{ip: clientIP{trusted: trusted, header: c.proxyHeader}, v6bits: c.ipv6Prefix}, nil
}

// Subject returns the subject under which an ip limiter counts a request
// from peer (an address with or without a port, as in "192.0.2.7:5123")
// whose header fields are h: "ip:" and the canonical client address
// (CanonicalizeIP), or, for a peer that is not an IP address (a Unix
// socket), "peer:" and peer itself. h is read only when peer is a trusted
// proxy, and only for the proxy header, whose name it receives in
// canonical form ("X-Forwarded-For"); a nil h has no fields.
func (c *ClientIP) Subject(peer string, h HeaderValues) string {
	if h == nil {
		h = http.Header(nil)
	}
	return c.ip.subject(peer, h, c.v6bits)
}

// SubjectSource gives Plan.Checks what the limiters of one request count
// by. A transport implements it over its own request.
type SubjectSource interface {
	// ClientIP returns the subject of the request's client address, as
	// ClientIP.Subject does. It is called for ip limiters and for each
	// limiter that counts the request by its address instead (see the
	// Subjects section of the package documentation); a source should find
	// the address once.
	ClientIP() string
	// Value returns the value that limiter i, l, of kind header, param or
	// key counts by; "" counts the request by its client address.
	Value(i int, l rules.Limiter) string
}

// Plan is the part of enforcing one limiter list — a group's defaults or
// one role's override — that does not depend on the request, for
// transports other than net/http: it builds a request's engine checks,
// names the advertised policies and renders the RateLimit-Policy and
// RateLimit field values exactly as the middleware does. A Plan is
// immutable and safe for concurrent use.
type Plan struct{ p *plan }

// QuotaPolicy is one advertised window: window Window of limiter Limiter,
// named Name in the RateLimit-Policy and RateLimit fields (PolicyName,
// made unique within its plan).
type QuotaPolicy struct {
	Name    string
	Limiter rules.Limiter
	Window  rules.Window
}

// NewPlan prepares the limiters ls of the override for role, or of a
// group's defaults when role is "". It fails when a limiter has a kind the
// rule language does not define. A Plan calls no function: Checks asks a
// SubjectSource for the values of header, param and key limiters, and
// leaves the cost of a limiter whose cost names a function to the
// transport, which calls its own cost function.
func NewPlan(role string, ls []rules.Limiter) (*Plan, error) {
	var keys map[string]KeyFunc
	var costs map[string]CostFunc
	for _, l := range ls {
		// The functions are never called; newPlan only needs to know that
		// the names are served.
		if l.Kind == rules.Key {
			if keys == nil {
				keys = make(map[string]KeyFunc)
			}
			keys[l.Name] = func(*http.Request) string { return "" }
		}
		if l.Cost != "" && !isDecimal(l.Cost) {
			if costs == nil {
				costs = make(map[string]CostFunc)
			}
			costs[l.Cost] = func(*http.Request) (int64, error) { return 1, nil }
		}
	}
	// Limit functions ($name) read an *http.Request: other transports have
	// none to give, so newPlan refuses them as unknown.
	p, err := newPlan(role, ls, keys, costs, nil)
	if err != nil {
		return nil, err
	}
	return &Plan{p: p}, nil
}

// Limiters returns the plan's limiters, in order; the slice must not be
// modified.
func (p *Plan) Limiters() []rules.Limiter { return p.p.limiters }

// PolicyField returns the RateLimit-Policy value of the plan's windows, as
// in `"ip-1s";q=5;w=1, "user-1h";q=1000;w=3600`.
func (p *Plan) PolicyField() string { return p.p.field }

// Checks returns the engine checks of a request by id, resolved as res by
// role.Policy.Resolve to this plan's limiters: one check per limiter, in
// order, with its subject as the Subjects section of the package
// documentation says and its constant cost (Cost 0 for a cost of 1). The
// Cost of a limiter whose cost names a function is left 0: the transport
// sets it, at least 1, from its own function before deciding (and checks
// Oversized). The checks are what the middleware passes to Decider.Allow.
func (p *Plan) Checks(id role.Identity, res role.Resolution, src SubjectSource) []engine.Check {
	cs := make([]engine.Check, len(p.p.limiters))
	for i, lim := range p.p.limiters {
		cs[i].Limiter = lim
		var v string
		if lim.Kind.Named() {
			v = src.Value(i, lim)
		}
		if cs[i].Subject = subjectFor(lim.Kind, id.User, res.ByIP, v); cs[i].Subject == "" {
			cs[i].Subject = src.ClientIP()
		}
		if c := p.p.costs[i]; c.fn == nil && c.n > 1 {
			cs[i].Cost = c.n
		}
	}
	return cs
}

func (p *Plan) quota(pol *policy) QuotaPolicy {
	return QuotaPolicy{Name: pol.name, Limiter: p.p.limiters[pol.check], Window: pol.window}
}

// Policy returns the policy of ws, a window state of a decision on this
// plan's checks; ok is false when the plan has no such window.
func (p *Plan) Policy(ws engine.WindowState) (qp QuotaPolicy, ok bool) {
	if pol := p.p.lookup(ws.Check, ws.Window); pol != nil {
		return p.quota(pol), true
	}
	return QuotaPolicy{}, false
}

// Oversized returns the policy of a window whose limit is below the cost
// of its check in cs, this plan's checks of a request: no later moment
// would admit that request, so the middleware refuses it without asking
// the engine and without a retry delay. ok is false when every cost fits.
func (p *Plan) Oversized(cs []engine.Check) (qp QuotaPolicy, ok bool) {
	if pol, _ := p.p.oversized(cs); pol != nil {
		return p.quota(pol), true
	}
	return QuotaPolicy{}, false
}

// RateLimit returns the RateLimit field values of dec, a decision on this
// plan's checks — one List member per advertised quota unit, such as
// `"ip-1s";r=0;t=1` — with the effective window t capped at maxT seconds
// when maxT is positive (a denial's RetryAfterSeconds), and the index in
// dec.Windows of the primary window: the denying one, else the most
// constrained; -1 when dec has no windows. The middleware sends exactly
// these values.
func (p *Plan) RateLimit(dec *engine.Decision, maxT int64) (values []string, primary int) {
	items, primary := p.p.constrained(dec)
	for _, i := range items {
		ws := dec.Windows[i]
		if pol := p.p.lookup(ws.Check, ws.Window); pol != nil {
			values = append(values, rateLimitField(pol.name, ws, pol.per, maxT))
		}
	}
	return values, primary
}
