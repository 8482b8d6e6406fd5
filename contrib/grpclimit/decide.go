package grpclimit

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/slidelimit/slidelimit/engine"
	"github.com/slidelimit/slidelimit/internal/lifecycle"
	"github.com/slidelimit/slidelimit/middleware"
	"github.com/slidelimit/slidelimit/role"
	"github.com/slidelimit/slidelimit/rules"
)

// admitted is an admitted call with work after its handler: response
// metadata to send, an outcome that decides whether it stays counted (a
// group with count:), slots to release or costs to settle.
type admitted struct {
	ctx    context.Context // the handler's: with report, the one ReportCost reads
	m      *method
	p      *lifecycle.Plan
	checks []engine.Check
	req    engine.Request
	dec    engine.Decision
	give   bool                  // given back unless its code is listed in count:
	free   bool                  // holds slots of in-flight windows, released when the call ends
	report *lifecycle.CostReport // what the handler reports (ReportCost); nil when nothing settles
	md     metadata.MD           // the rate-limit metadata; nil for none
}

// handlerContext returns the context the handler of c runs with: ctx, or
// the one that carries c's cost report.
func (c *admitted) handlerContext(ctx context.Context) context.Context {
	if c.report != nil {
		return c.ctx
	}
	return ctx
}

// counts reports whether the response messages of c are measured for a
// Settlement.Written.
func (c *admitted) counts() bool { return c.report != nil && c.p.SettlesWritten() }

// admit decides a call of m, as named steps: resolve the caller, price
// the call, decide, respond. It returns a non-nil *admitted when the
// handler must run with work after it; nil and nil when the handler must
// run and nothing follows; nil and a status error when the call is
// refused, whose metadata it has set.
func (l *Limiter) admit(ctx context.Context, m *method, fullMethod string, req any, out trailerSetter) (*admitted, error) {
	c := &gcall{ctx: ctx, m: m}
	if !l.resolve(c, fullMethod) {
		return nil, nil
	}
	if pass, err := l.priceCall(c, fullMethod, req, out); !pass || err != nil {
		return nil, err
	}
	if pass, err := l.decide(c); !pass || err != nil {
		return nil, err
	}
	return l.respond(c, out)
}

// gcall is one call's way through admit: each step fills in what the
// later ones need.
type gcall struct {
	ctx    context.Context
	m      *method
	p      *lifecycle.Plan
	shadow bool
	checks []engine.Check
	ev     middleware.Event
	req    engine.Request
	dec    engine.Decision
	retry  int64 // the advertised wait of a refusal, which caps t
	values []string
	prim   int
}

// resolve finds the caller's role, plan and scope; an exempt caller (or
// one no limiter applies to) is passed on.
func (l *Limiter) resolve(c *gcall, fullMethod string) bool {
	id, _ := role.FromContext(c.ctx)
	res := l.policy.Resolve(c.m.group, id)
	c.p = c.m.planFor(res)
	if res.Exempt || c.p == nil || len(c.p.Limiters) == 0 {
		l.emit(middleware.Event{Role: res.Role, Exempt: true, Allowed: true})
		return false
	}
	c.shadow = c.m.group.Mode == rules.Shadow
	scope := c.m.group.Scope
	if scope == "" {
		scope = fullMethod
	}
	c.ev = middleware.Event{Scope: scope, Role: res.Role, Shadow: c.shadow}
	c.checks = c.p.Checks(&c.m.group, id, res, &source{ctx: c.ctx, l: l})
	return true
}

// priceCall sets the costs of cost functions, and refuses a call that
// cannot be costed or costs more than a whole quota (shadow mode passes
// both on, uncounted).
func (l *Limiter) priceCall(c *gcall, fullMethod string, req any, out trailerSetter) (bool, error) {
	ctx, ev := c.ctx, &c.ev
	if err := l.price(ctx, fullMethod, req, c.p, c.checks); err != nil {
		code, msg, level, httpStatus := codes.Internal, "internal error", slog.LevelError, 500
		if errors.Is(err, middleware.ErrCostBadRequest) {
			code, msg, level, httpStatus = codes.InvalidArgument, "request cannot be costed", slog.LevelInfo, 400
		}
		l.logger.LogAttrs(ctx, level, "slidelimit: cost function failed; call not counted",
			slog.String("scope", ev.Scope), slog.Any("error", err))
		ev.Err = err
		return false, l.refuse(c, httpStatus, status.Error(code, msg))
	}
	pol, win := c.p.Oversized(c.checks)
	if pol == nil {
		return true, nil
	}
	q := quotaOf(c.p, pol, win)
	l.logger.LogAttrs(ctx, slog.LevelInfo, "slidelimit: call costs more than a whole quota",
		slog.String("scope", ev.Scope), slog.String("policy", q.Name))
	ev.Limiter, ev.Policy, ev.Window = q.Limiter.ID(), q.Name, q.Window
	if !c.shadow {
		md := fields(c.p.Field, nil)
		md[mdPushback] = []string{"-1"} // gRFC A6: do not retry
		out.SetTrailer(md)
	}
	return false, l.refuse(c, 429, neverStatus(q, c.checks))
}

// refuse emits the event of a call refused with st (HTTP status
// httpStatus) and returns st, or passes the call on in shadow mode.
func (l *Limiter) refuse(c *gcall, httpStatus int, st error) error {
	if c.shadow {
		c.ev.Allowed = true
		l.emit(c.ev)
		return nil
	}
	c.ev.Status = httpStatus
	l.emit(c.ev)
	return st
}

// decide asks the Decider and works out the deciding window. A call the
// engine could not evaluate is refused with codes.Internal (outside
// shadow mode); backend trouble is logged.
func (l *Limiter) decide(c *gcall) (bool, error) {
	ctx, ev := c.ctx, &c.ev
	c.req = engine.Request{Scope: ev.Scope, Checks: c.checks, Fail: c.m.group.Fail, Zone: c.m.zone}
	d := c.p.Decide(ctx, l.decider, c.req, c.shadow)
	dec, err := d.Decision, d.Err
	c.dec, c.retry, c.prim = dec, d.Retry, d.Primary
	c.values = c.p.Values(&d, c.retry)
	ev.Latency = d.Latency
	ev.Allowed, ev.RetryAfter, ev.Source, ev.Err, ev.Decision = dec.Allowed, dec.RetryAfter, dec.Source, err, dec
	if pol := d.Policy; pol != nil {
		ev.Limiter, ev.Policy, ev.Window = c.p.Limiters[pol.Check].ID(), pol.Name, pol.Window
	}
	if err == nil {
		return true, nil
	}
	if !d.Invalid {
		l.logBackend(ctx, ev.Scope, dec, err)
		return true, nil
	}
	l.logger.LogAttrs(ctx, slog.LevelError, "slidelimit: engine rejected request",
		slog.String("scope", ev.Scope), slog.Any("error", err))
	if c.shadow {
		l.emit(c.ev)
		return false, nil
	}
	ev.Status = 500
	l.emit(c.ev)
	return false, status.Error(codes.Internal, "internal error")
}

// respond answers a decided call: an admitted one (or any in shadow mode)
// goes on with its metadata and its work after the handler; a denial's
// metadata goes in the trailers, leaving the response Trailers-Only:
// response headers would commit the call, and a gRPC client never retries
// a committed call (gRFC A6).
func (l *Limiter) respond(c *gcall, out trailerSetter) (*admitted, error) {
	ctx, ev, dec, m := c.ctx, &c.ev, &c.dec, c.m
	var next *admitted
	if dec.Allowed && (m.counted != 0 || m.slots || c.p.Settles()) {
		next = &admitted{ctx: ctx, m: m, p: c.p, checks: c.checks, req: c.req, dec: c.dec, give: m.counted != 0, free: m.slots}
		if c.p.Settles() {
			next.ctx, next.report = c.p.Reporting(ctx)
		}
	}
	switch {
	case c.shadow:
		if !dec.Allowed {
			l.logger.LogAttrs(ctx, slog.LevelInfo, "slidelimit: shadow mode would deny call",
				slog.String("scope", ev.Scope), slog.String("policy", ev.Policy),
				slog.Duration("retry_after", dec.RetryAfter), slog.String("source", dec.Source.String()))
		}
		l.emit(c.ev)
		return next, nil
	case dec.Allowed:
		if md := fields(c.p.Field, c.values); len(md) > 0 {
			if next == nil {
				next = &admitted{}
			}
			next.md = md
		}
		l.emit(c.ev)
		return next, nil
	}
	pushback := formatInt(c.retry * 1000)
	if dec.Source == engine.FromFailClosed {
		ev.Status = 503
		l.emit(c.ev)
		md := fields(c.p.Field, nil)
		md[mdPushback] = []string{pushback}
		out.SetTrailer(md)
		return nil, unavailableStatus(c.retry)
	}
	ev.Status = 429
	l.emit(c.ev)
	md := fields(c.p.Field, c.values)
	md[mdPushback] = []string{pushback}
	out.SetTrailer(md)
	return nil, deniedStatus(c.p, dec, c.checks, c.prim, c.retry)
}

// emit gives ev to the hooks.
func (l *Limiter) emit(ev middleware.Event) {
	for _, h := range l.hooks {
		h(ev)
	}
}

// fields returns the ratelimit-policy and ratelimit metadata.
func fields(policy string, values []string) metadata.MD {
	md := metadata.MD{}
	if policy != "" {
		md[mdPolicy] = []string{policy}
	}
	if len(values) > 0 {
		md[mdRateLimit] = values
	}
	return md
}

// price sets the cost of every check whose limiter names a cost function,
// calling each function once.
func (l *Limiter) price(ctx context.Context, fullMethod string, req any, p *lifecycle.Plan, cs []engine.Check) error {
	var called map[string]int64
	for i, lim := range p.Limiters {
		if lim.Cost == "" || isDecimal(lim.Cost) {
			continue
		}
		n, ok := called[lim.Cost]
		if !ok {
			var err error
			n, err = l.costs[lim.Cost](ctx, fullMethod, req)
			if err != nil || n < 1 {
				return &middleware.CostError{Name: lim.Cost, Limiter: lim.ID(), Cost: n, Err: err}
			}
			if called == nil {
				called = make(map[string]int64, 1)
			}
			called[lim.Cost] = n
		}
		cs[i].Cost = n
	}
	return nil
}

// after runs when an admitted call ends, however it ends: it gives a call
// of a group with count: back unless its status is listed (which frees its
// in-flight slots too), else settles its costs (WithSettle) to what the
// handler reported or, for Settlement.Written, the bytes of response
// messages written (negative: unknown), and releases the slots it holds (a
// stream holds them until its handler returns), in one finish (the engine's
// FinishAsync, which the response does not wait for). A handler
// that panics leaves the call counted at its estimate: its outcome is
// unknown, and counting it errs on the side of denying.
func (l *Limiter) after(c *admitted, err error, panicked bool, written int64) {
	if !c.free && !c.give && c.report == nil {
		return // only metadata to send
	}
	ctx := context.WithoutCancel(c.ctx)
	out := engine.Outcome{GiveBack: c.give && !panicked && !c.m.counted.has(status.Code(err))}
	if c.report != nil && !out.GiveBack && !panicked {
		out.Actual = c.p.Actual(c.checks, c.report, written)
	}
	if ferr := lifecycle.Finish(ctx, l.decider, &c.req, &c.dec, out); ferr != nil {
		l.logBackend(ctx, c.req.Scope, c.dec, ferr) // at most once a second: not a line per call
	}
}

// logBackend logs a backend error at most once a second: an outage must
// not log a line per call.
func (l *Limiter) logBackend(ctx context.Context, scope string, dec engine.Decision, err error) {
	now := time.Now().UnixNano()
	next := l.nextLog.Load()
	if now < next || !l.nextLog.CompareAndSwap(next, now+int64(time.Second)) {
		return
	}
	l.logger.LogAttrs(ctx, slog.LevelWarn, "slidelimit: rate-limit backend error (logged at most once a second)",
		slog.String("scope", scope), slog.String("source", dec.Source.String()),
		slog.Bool("allowed", dec.Allowed), slog.Any("error", err))
}
