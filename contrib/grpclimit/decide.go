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
	"github.com/slidelimit/slidelimit/middleware"
	"github.com/slidelimit/slidelimit/role"
	"github.com/slidelimit/slidelimit/rules"
)

// admitted is an admitted call with work after its handler: response
// metadata to send, or an outcome that decides whether it stays counted
// (a group with count:).
type admitted struct {
	ctx  context.Context
	m    *method
	req  engine.Request
	dec  engine.Decision
	give bool        // given back unless its code is listed in count:
	free bool        // holds slots of in-flight windows, released when the call ends
	md   metadata.MD // the rate-limit metadata; nil for none
}

// admit decides a call of m. It returns a non-nil *admitted when the
// handler must run with work after it; nil and nil when the handler must
// run and nothing follows; nil and a status error when the call is
// refused, whose metadata it has set.
func (l *Limiter) admit(ctx context.Context, m *method, fullMethod string, req any, out trailerSetter) (*admitted, error) {
	id, _ := role.FromContext(ctx)
	res := l.policy.Resolve(m.group, id)
	p := m.planFor(res)
	if res.Exempt || p == nil || len(p.Limiters()) == 0 {
		l.emit(middleware.Event{Role: res.Role, Exempt: true, Allowed: true})
		return nil, nil
	}
	shadow := m.group.Mode == rules.Shadow
	scope := m.group.Scope
	if scope == "" {
		scope = fullMethod
	}
	ev := middleware.Event{Scope: scope, Role: res.Role, Shadow: shadow}
	checks := p.Checks(id, res, &source{ctx: ctx, l: l})
	for i := range checks {
		checks[i].Block = m.group.ActiveBlock() // as the HTTP middleware applies it
	}
	if err := l.price(ctx, fullMethod, req, p, checks); err != nil {
		code, msg, level, httpStatus := codes.Internal, "internal error", slog.LevelError, 500
		if errors.Is(err, middleware.ErrCostBadRequest) {
			code, msg, level, httpStatus = codes.InvalidArgument, "request cannot be costed", slog.LevelInfo, 400
		}
		l.logger.LogAttrs(ctx, level, "slidelimit: cost function failed; call not counted",
			slog.String("scope", scope), slog.Any("error", err))
		ev.Err = err
		if shadow {
			ev.Allowed = true
			l.emit(ev)
			return nil, nil
		}
		ev.Status = httpStatus
		l.emit(ev)
		return nil, status.Error(code, msg)
	}
	if pol, ok := p.Oversized(checks); ok {
		l.logger.LogAttrs(ctx, slog.LevelInfo, "slidelimit: call costs more than a whole quota",
			slog.String("scope", scope), slog.String("policy", pol.Name))
		ev.Limiter, ev.Policy, ev.Window = pol.Limiter.ID(), pol.Name, pol.Window
		if shadow {
			ev.Allowed = true
			l.emit(ev)
			return nil, nil
		}
		ev.Status = 429
		l.emit(ev)
		md := fields(p.PolicyField(), nil)
		md[mdPushback] = []string{"-1"} // gRFC A6: do not retry
		out.SetTrailer(md)
		return nil, neverStatus(pol, checks)
	}

	r := engine.Request{Scope: scope, Checks: checks, Fail: m.group.Fail}
	begin := time.Now()
	dec, err := l.decider.Allow(ctx, r)
	ev.Latency = time.Since(begin)
	ev.Allowed, ev.RetryAfter, ev.Source, ev.Err, ev.Decision = dec.Allowed, dec.RetryAfter, dec.Source, err, dec
	var retry int64 // the advertised wait of a refusal, which caps t
	if !dec.Allowed && !shadow {
		retry = middleware.RetryAfterSeconds(dec.RetryAfter)
	}
	values, primary := p.RateLimit(&dec, retry)
	if primary >= 0 {
		if pol, ok := p.Policy(dec.Windows[primary]); ok {
			ev.Limiter, ev.Policy, ev.Window = pol.Limiter.ID(), pol.Name, pol.Window
		}
	}
	if err != nil {
		if errors.Is(err, engine.ErrInvalid) {
			l.logger.LogAttrs(ctx, slog.LevelError, "slidelimit: engine rejected request",
				slog.String("scope", scope), slog.Any("error", err))
			if shadow {
				l.emit(ev)
				return nil, nil
			}
			ev.Status = 500
			l.emit(ev)
			return nil, status.Error(codes.Internal, "internal error")
		}
		l.logBackend(ctx, scope, dec, err)
	}
	var next *admitted
	if dec.Allowed && (m.counted != 0 || m.slots) {
		next = &admitted{ctx: ctx, m: m, req: r, dec: dec, give: m.counted != 0, free: m.slots}
	}
	switch {
	case shadow:
		if !dec.Allowed {
			l.logger.LogAttrs(ctx, slog.LevelInfo, "slidelimit: shadow mode would deny call",
				slog.String("scope", scope), slog.String("policy", ev.Policy),
				slog.Duration("retry_after", dec.RetryAfter), slog.String("source", dec.Source.String()))
		}
		l.emit(ev)
		return next, nil
	case dec.Allowed:
		if md := fields(p.PolicyField(), values); len(md) > 0 {
			if next == nil {
				next = &admitted{}
			}
			next.md = md
		}
		l.emit(ev)
		return next, nil
	}
	// A refusal's metadata goes in the trailers, leaving the response
	// Trailers-Only: response headers would commit the call, and a gRPC
	// client never retries a committed call (gRFC A6).
	pushback := formatInt(retry * 1000)
	if dec.Source == engine.FromFailClosed {
		ev.Status = 503
		l.emit(ev)
		md := fields(p.PolicyField(), nil)
		md[mdPushback] = []string{pushback}
		out.SetTrailer(md)
		return nil, unavailableStatus(retry)
	}
	ev.Status = 429
	l.emit(ev)
	md := fields(p.PolicyField(), values)
	md[mdPushback] = []string{pushback}
	out.SetTrailer(md)
	return nil, deniedStatus(p, &dec, checks, primary, retry)
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
func (l *Limiter) price(ctx context.Context, fullMethod string, req any, p *middleware.Plan, cs []engine.Check) error {
	var called map[string]int64
	for i, lim := range p.Limiters() {
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
// in-flight slots too), else releases the slots it holds (a stream holds
// them until its handler returns). A handler that panics leaves the call
// counted: its outcome is unknown, and counting it errs on the side of
// denying.
func (l *Limiter) after(c *admitted, err error, panicked bool) {
	if !c.free && !c.give {
		return // only metadata to send
	}
	ctx := context.WithoutCancel(c.ctx)
	give := c.give && !panicked && !c.m.counted.has(status.Code(err))
	if f, ok := l.decider.(finisher); ok {
		// One call, one round trip: give back or not, release the slots.
		if ferr := f.Finish(ctx, c.dec, engine.Outcome{GiveBack: give}); ferr != nil {
			l.logBackend(ctx, c.req.Scope, c.dec, ferr)
		}
		return
	}
	if give {
		gerr := l.giver.GiveBack(ctx, c.req, c.dec)
		if gerr == nil {
			return // the give-back removed the call from every key, slots included
		}
		l.logBackend(ctx, c.req.Scope, c.dec, gerr) // at most once a second: not a line per call
	}
	if c.free {
		if rerr := l.releaser.Release(ctx, c.req, c.dec); rerr != nil {
			l.logBackend(ctx, c.req.Scope, c.dec, rerr)
		}
	}
}

// finisher finishes an admitted call in one call; *engine.Engine
// implements it (see engine.Engine.Finish). A Decider that is not one
// finishes with its GiveBack and Release methods instead.
type finisher interface {
	Finish(ctx context.Context, d engine.Decision, o engine.Outcome) error
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
