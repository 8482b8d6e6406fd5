package middleware

import (
	"net/http"
	"strconv"

	"github.com/slidelimit/slidelimit/engine"
	"github.com/slidelimit/slidelimit/internal/lifecycle"
	"github.com/slidelimit/slidelimit/rules"
)

// call is one request's way through the middleware: its Admission, which
// runs the request's life (internal/lifecycle), and the request.
type call struct {
	lifecycle.Admission
	r *http.Request
}

// source is the lifecycle.Source of a request: what the middleware
// translates it into. It is apart from call so that the call, which
// nothing else keeps a pointer to, stays on the stack.
type source struct {
	l *limiter
	r *http.Request
}

// serve is a request's life in the middleware. The Admission resolves the
// caller, prices the request, decides and works out the Verdict; serve
// translates the Verdict into the response — a refusal, or the RateLimit
// fields and the handler — and, when the Verdict asks for it, the
// handler's end into the Admission's finish (after.go).
func (l *limiter) serve(w http.ResponseWriter, r *http.Request, next http.Handler) {
	c := &call{r: r}
	c.HTTP = r
	v := c.Admit(r.Context(), l.rules, &source{l: l, r: r})
	switch v.Status {
	case 0:
		if v.Policy != "" || len(v.Values) > 0 {
			l.setFields(w.Header(), c, 0)
		}
		l.run(w, next, c)
	case http.StatusTooManyRequests, http.StatusServiceUnavailable:
		l.deny(w, c)
	default: // 400 or 500: the request could not be priced or decided
		writeProblem(w, problem{Type: problemBlank, Title: http.StatusText(v.Status), Status: v.Status})
	}
}

// deny answers a refusal of c: 429 with its RateLimit fields and
// Retry-After (none for a request that can never be admitted), or 503
// with the policy alone, by the denied handler.
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
		d.Policy, d.Rule, d.Window = pol.Name, c.Event.Rule, c.Event.Window
		d.Cost = c.Plan.Rules[pol.Check].Cost
		l.denied(w, c.r, d)
		return
	case v.Status == http.StatusServiceUnavailable:
		if v.Policy != "" {
			h.Add(headerPolicy, v.Policy)
		}
	default:
		l.setFields(h, c, v.Retry)
		if pol := c.Decided.Policy; pol != nil {
			d.Policy, d.Rule, d.Window = pol.Name, c.Event.Rule, c.Event.Window
			d.Cost = c.Plan.Rules[pol.Check].Cost
		}
	}
	d.RetryAfter, d.Decision = secondsDuration(v.Retry), *dec
	h.Set(headerRetryAfter, strconv.FormatInt(v.Retry, 10))
	l.denied(w, c.r, d)
}

// rateLimitKey is the RateLimit field's key in an http.Header.
var rateLimitKey = http.CanonicalHeaderKey(headerRateLimit)

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
	if len(v.Values) > 0 {
		// The values are the request's own slice: the header may keep it.
		if vs := h[rateLimitKey]; len(vs) > 0 {
			h[rateLimitKey] = append(vs, v.Values...)
		} else {
			h[rateLimitKey] = v.Values
		}
	}
	if l.legacy && len(c.Items) > 0 {
		ws := c.Decision.Windows[c.Items[0]]
		setLegacy(h, ws, c.Plan.Lookup(ws.Check, ws.Window).Per)
	}
}

// FindScope implements lifecycle.Source: in order of precedence, the group's
// scope: statement, WithScope, WithScopeFunc, and the pattern the router
// matched (http.Request.Pattern).
func (s *source) FindScope() string {
	if s.l.scope != "" {
		return s.l.scope
	}
	if s.l.scopeFn != nil {
		if sc := s.l.scopeFn(s.r); sc != "" {
			return sc
		}
	}
	return s.r.Pattern
}

// Peer implements lifecycle.Source.
func (s *source) Peer() (string, lifecycle.HeaderValues) { return s.r.RemoteAddr, s.r.Header }

// Value implements lifecycle.Source: header values, path values and key
// functions.
func (s *source) Value(p *lifecycle.Plan, i int, lim rules.Rule) string {
	switch lim.Kind {
	case rules.Header:
		return s.r.Header.Get(lim.Name)
	case rules.Param:
		return s.r.PathValue(lim.Name)
	case rules.Key:
		return planOf(p).keys[i](s.r)
	}
	return ""
}

// Cost implements lifecycle.Source.
func (s *source) Cost(p *lifecycle.Plan, i int, _ string) (int64, error) {
	return planOf(p).costs[i](s.r)
}

// Limits implements lifecycle.Source (limitfunc.go).
func (s *source) Limits(p *lifecycle.Plan, cs []engine.Check) (string, error) {
	return planOf(p).resolveLimits(s.r, p, cs)
}

// Distinct implements lifecycle.Source: the value of distinct:NAME.
func (s *source) Distinct() string { return s.l.distinct(s.r) }
