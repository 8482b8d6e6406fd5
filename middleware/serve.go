package middleware

import (
	"errors"
	"log/slog"
	"net/http"
	"strconv"

	"github.com/slidelimit/slidelimit/engine"
	"github.com/slidelimit/slidelimit/internal/lifecycle"
	"github.com/slidelimit/slidelimit/role"
	"github.com/slidelimit/slidelimit/rules"
)

// call is one request's way through the middleware: each step of serve
// fills in what the later ones need.
type call struct {
	r      *http.Request
	id     role.Identity
	res    role.Resolution
	p      *plan
	scope  string
	shadow bool
	checks []engine.Check
	field  string // the RateLimit-Policy value, with the request's limits

	req     engine.Request
	dec     engine.Decision
	err     error
	ev      Event
	pol     *lifecycle.Policy // the deciding window's policy, when advertised
	items   []int             // the windows advertised in RateLimit (plan.constrained)
	primary int
	report  *lifecycle.CostReport // what the handler reports (ReportCost), for a settled request
}

// serve is a request's life in the middleware, as named steps: resolve the
// caller, price the request, decide, respond; an admitted request then runs
// the handler, after which the steps of after.go (give back, ...) run. A
// step that answers the request itself, or passes it on uncounted, returns
// false.
func (l *limiter) serve(w http.ResponseWriter, r *http.Request, next http.Handler) {
	c := &call{r: r}
	if !l.resolve(w, next, c) || !l.price(w, next, c) || !l.decide(w, c) || !l.respond(w, c) {
		return
	}
	l.serveAdmitted(w, next, c)
}

// passUncounted emits ev and passes the request to next without any
// window counting it: an exempt caller, or a shadow-mode request the
// middleware could not decide on.
func (l *limiter) passUncounted(w http.ResponseWriter, next http.Handler, c *call, ev Event) {
	ev.Allowed = true
	l.emit(ev)
	next.ServeHTTP(w, c.r)
}

// resolve finds the caller's identity, role, plan and scope. An exempt
// caller (or one no limiter applies to) is passed on; a request without a
// scope is a configuration error, answered 500 (passed on in shadow mode).
func (l *limiter) resolve(w http.ResponseWriter, next http.Handler, c *call) bool {
	r := c.r
	c.id, _ = role.FromContext(r.Context())
	c.res = l.policy.Resolve(l.group, c.id)
	c.p = l.planFor(c.res)
	if c.res.Exempt || len(c.p.Limiters) == 0 {
		l.passUncounted(w, next, c, Event{Request: r, Role: c.res.Role, Exempt: true})
		return false
	}
	c.shadow = l.group.Mode == rules.Shadow
	c.scope = l.scopeOf(r)
	if c.scope != "" {
		return true
	}
	l.logger.LogAttrs(r.Context(), slog.LevelError, "slidelimit: no scope for request; set a scope: statement, WithScope or WithScopeFunc",
		slog.String("method", r.Method), slog.String("path", r.URL.Path))
	ev := Event{Request: r, Role: c.res.Role, Shadow: c.shadow, Err: ErrNoScope}
	if c.shadow {
		l.passUncounted(w, next, c, ev)
		return false
	}
	ev.Status = http.StatusInternalServerError
	l.emit(ev)
	writeInternalError(w)
	return false
}

// price builds the request's checks, their costs and the limits of limit
// functions. A cost or limit function that fails is answered 400 or 500; a
// request costing more than a whole quota is refused (see
// refuseOversized). Shadow mode passes both on, uncounted.
func (l *limiter) price(w http.ResponseWriter, next http.Handler, c *call) bool {
	r := c.r
	c.checks = l.checks(r, c.id, c.res, c.p)
	err := l.priceChecks(r, c.p, c.checks)
	if err == nil {
		c.field, err = l.resolveLimits(r, c.p, c.checks)
	}
	if err != nil {
		status := http.StatusInternalServerError
		level := slog.LevelError
		if errors.Is(err, ErrCostBadRequest) || errors.Is(err, ErrLimitBadRequest) {
			status, level = http.StatusBadRequest, slog.LevelInfo
		}
		msg := "slidelimit: cost function failed; request not counted"
		if errors.Is(err, ErrLimit) {
			msg = "slidelimit: limit function failed; request not counted"
		}
		l.logger.LogAttrs(r.Context(), level, msg,
			slog.String("scope", c.scope), slog.Int("status", status), slog.Any("error", err))
		ev := Event{Request: r, Scope: c.scope, Role: c.res.Role, Shadow: c.shadow, Err: err}
		if c.shadow {
			// Shadow mode never refuses: the handler answers, uncounted.
			l.passUncounted(w, next, c, ev)
			return false
		}
		ev.Status = status
		l.emit(ev)
		writeProblem(w, problem{Type: ProblemBlank, Title: http.StatusText(status), Status: status})
		return false
	}
	if pol, win := c.p.Oversized(c.checks); pol != nil {
		l.refuseOversized(w, r, next, c, pol, win, Event{Request: r, Scope: c.scope, Role: c.res.Role, Shadow: c.shadow})
		return false
	}
	return true
}

// decide asks the Decider and works out the deciding window. A request the
// engine could not evaluate is answered 500 (outside shadow mode); backend
// trouble is logged and the decision's source says how it was handled.
func (l *limiter) decide(w http.ResponseWriter, c *call) bool {
	r := c.r
	c.req = engine.Request{Scope: c.scope, Checks: c.checks, Fail: l.group.Fail, Zone: l.zone}
	d := c.p.Decide(r.Context(), l.decider, c.req, c.shadow)
	c.dec, c.err = d.Decision, d.Err
	dec, err := &c.dec, c.err
	c.ev = Event{
		Request: r, Scope: c.scope, Role: c.res.Role, Allowed: dec.Allowed, Shadow: c.shadow,
		RetryAfter: dec.RetryAfter, Source: dec.Source, Err: err, Decision: *dec, Latency: d.Latency,
	}
	c.items, c.primary = d.Items, d.Primary
	if c.pol = d.Policy; c.pol != nil {
		c.ev.Limiter, c.ev.Policy, c.ev.Window = c.p.Limiters[c.pol.Check].ID(), c.pol.Name, dec.Windows[c.primary].Window
	}
	if err == nil {
		return true
	}
	if !d.Invalid {
		l.logBackend(r, c.scope, *dec, err)
		return true
	}
	// The engine could not evaluate the request: a bug or a group the
	// engine rejects, not a client over its limit, so 429 would lie.
	l.logger.LogAttrs(r.Context(), slog.LevelError, "slidelimit: engine rejected request",
		slog.String("scope", c.scope), slog.Any("error", err))
	if c.shadow {
		return true
	}
	c.ev.Status = http.StatusInternalServerError
	l.emit(c.ev)
	writeInternalError(w)
	return false
}

// respond sets the response fields of a decided request and emits its
// event. It answers a denial (429, or 503 when Redis failed and the fail
// mode is closed) and returns false; an admitted request, or any request
// in shadow mode, goes on to the handler.
func (l *limiter) respond(w http.ResponseWriter, c *call) bool {
	r, p, dec := c.r, c.p, &c.dec
	switch {
	case c.shadow:
		if !dec.Allowed {
			l.logger.LogAttrs(r.Context(), slog.LevelInfo, "slidelimit: shadow mode would deny request",
				slog.String("scope", c.scope), slog.String("policy", c.ev.Policy),
				slog.Duration("retry_after", dec.RetryAfter), slog.String("source", dec.Source.String()))
		}
		l.emit(c.ev)
		return true
	case dec.Allowed:
		l.setFields(w.Header(), c.field, p, dec, c.items, 0)
		l.emit(c.ev)
		return true
	}

	retry := lifecycle.RetryAfterSeconds(dec.RetryAfter)
	d := Denial{Status: http.StatusTooManyRequests, RetryAfter: secondsDuration(retry), Scope: c.scope, Decision: *dec}
	h := w.Header()
	if dec.Source == engine.FromFailClosed {
		d.Status = http.StatusServiceUnavailable
		if c.field != "" {
			h.Add(headerPolicy, c.field)
		}
	} else {
		l.setFields(h, c.field, p, dec, c.items, retry)
		if c.pol != nil {
			d.Policy, d.Limiter, d.Window = c.pol.Name, c.ev.Limiter, c.ev.Window
			d.Cost = p.Limiters[c.pol.Check].Cost
		}
	}
	h.Set(headerRetryAfter, strconv.FormatInt(retry, 10))
	c.ev.Status = d.Status
	l.emit(c.ev)
	l.denied(w, r, d)
	return false
}
