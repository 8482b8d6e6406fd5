package middleware

import (
	"net/http"
	"strconv"

	"github.com/slidelimit/slidelimit/engine"
	"github.com/slidelimit/slidelimit/internal/lifecycle"
	"github.com/slidelimit/slidelimit/rules"
)

// call is one request's way through the middleware: its Admission, which
// runs the request's life (internal/lifecycle), and what the middleware
// translates into it. A *call is the Admission's lifecycle.Source.
type call struct {
	lifecycle.Admission
	l *limiter
	r *http.Request
}

// serve is a request's life in the middleware. The Admission resolves the
// caller, prices the request, decides and works out the Verdict; serve
// translates the Verdict into the response — a refusal, or the RateLimit
// fields and the handler — and, when the Verdict asks for it, the
// handler's end into the Admission's finish (after.go).
func (l *limiter) serve(w http.ResponseWriter, r *http.Request, next http.Handler) {
	c := &call{l: l, r: r}
	c.HTTP = r
	v := c.Admit(r.Context(), l.rules, c)
	switch v.Status {
	case 0:
		if v.Policy != "" || len(v.Values) > 0 {
			l.setFields(w.Header(), c, 0)
		}
		l.run(w, next, c)
	case http.StatusTooManyRequests, http.StatusServiceUnavailable:
		l.deny(w, c)
	default: // 400 or 500: the request could not be priced or decided
		writeProblem(w, problem{Type: ProblemBlank, Title: http.StatusText(v.Status), Status: v.Status})
	}
}

// deny answers a refusal of c: 429 with its RateLimit fields and
// Retry-After (none for a request that can never be admitted), or 503
// with the policy alone, by the DeniedHandler.
func (l *limiter) deny(w http.ResponseWriter, c *call) {
	v, dec := &c.Verdict, &c.Decision
	d := Denial{Status: v.Status, Scope: c.Scope, Never: v.Never}
	h := w.Header()
	switch {
	case v.Never:
		if v.Policy != "" {
			h.Add(headerPolicy, v.Policy)
		}
		pol := c.Decided.Policy
		d.Policy, d.Limiter, d.Window = pol.Name, c.Event.Limiter, c.Event.Window
		d.Cost = c.Plan.Limiters[pol.Check].Cost
		l.denied(w, c.r, d)
		return
	case v.Status == http.StatusServiceUnavailable:
		if v.Policy != "" {
			h.Add(headerPolicy, v.Policy)
		}
	default:
		l.setFields(h, c, v.Retry)
		if pol := c.Decided.Policy; pol != nil {
			d.Policy, d.Limiter, d.Window = pol.Name, c.Event.Limiter, c.Event.Window
			d.Cost = c.Plan.Limiters[pol.Check].Cost
		}
	}
	d.RetryAfter, d.Decision = secondsDuration(v.Retry), *dec
	h.Set(headerRetryAfter, strconv.FormatInt(v.Retry, 10))
	l.denied(w, c.r, d)
}

// setFields adds the RateLimit-Policy field (the plan's, or its resolved
// limits' for a plan with limit functions) and the RateLimit values of
// c's Verdict, and sets legacy fields for the first if enabled. maxT is
// the Retry-After value the legacy fields' window is capped at. The
// RateLimit fields are added, not set, so that nested middlewares (a
// router-wide limit around a route's own) each contribute their list
// members, as the draft allows a list to span field lines.
func (l *limiter) setFields(h http.Header, c *call, maxT int64) {
	v := &c.Verdict
	if v.Policy != "" {
		h.Add(headerPolicy, v.Policy)
	}
	for _, s := range v.Values {
		h.Add(headerRateLimit, s)
	}
	if l.legacy && len(c.Items) > 0 {
		ws := c.Decision.Windows[c.Items[0]]
		setLegacy(h, ws, c.Plan.Lookup(ws.Check, ws.Window).Per)
	}
}

// FindScope implements lifecycle.Source: in order of precedence, the group's
// scope: statement, WithScope, WithScopeFunc, and the pattern the router
// matched (http.Request.Pattern).
func (c *call) FindScope() string {
	if c.l.scope != "" {
		return c.l.scope
	}
	if c.l.scopeFn != nil {
		if s := c.l.scopeFn(c.r); s != "" {
			return s
		}
	}
	return c.r.Pattern
}

// Peer implements lifecycle.Source.
func (c *call) Peer() (string, lifecycle.HeaderValues) { return c.r.RemoteAddr, c.r.Header }

// Value implements lifecycle.Source: header values, path values and key
// functions.
func (c *call) Value(i int, lim rules.Limiter) string {
	switch lim.Kind {
	case rules.Header:
		return c.r.Header.Get(lim.Name)
	case rules.Param:
		return c.r.PathValue(lim.Name)
	case rules.Key:
		return planOf(c.Plan).keys[i](c.r)
	}
	return ""
}

// Cost implements lifecycle.Source.
func (c *call) Cost(i int, _ string) (int64, error) { return planOf(c.Plan).costs[i](c.r) }

// Limits implements lifecycle.Source (limitfunc.go).
func (c *call) Limits(p *lifecycle.Plan, cs []engine.Check) (string, error) {
	return planOf(p).resolveLimits(c.r, p, cs)
}

// Distinct implements lifecycle.Source: the value of distinct:NAME.
func (c *call) Distinct() string { return c.l.distinct(c.r) }
