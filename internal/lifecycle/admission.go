package lifecycle

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"time"

	"github.com/slidelimit/slidelimit/engine"
	"github.com/slidelimit/slidelimit/role"
	"github.com/slidelimit/slidelimit/rules"
)

// Source is what a transport translates its request into: the scope,
// the client's address, the values rules count by, the costs and the
// limits. The Admission calls each method at most once per request and
// only when a rule needs it.
type Source interface {
	// FindScope returns the request's scope; "" when it has none (answered
	// 500, ErrNoScope).
	FindScope() string
	// Peer returns the address of the request's peer (for net/http,
	// r.RemoteAddr) and the header the proxy header is read from.
	Peer() (addr string, h HeaderValues)
	// Value returns the value that rule i of p, l, of kind header,
	// param or key counts by; "" counts the request by its client address.
	Value(p *Plan, i int, l rules.Rule) string
	// Cost returns the result of cost function name, which rule i of p
	// names; an error is reported as a *CostError.
	Cost(p *Plan, i int, name string) (int64, error)
	// Limits gives the windows of p with limit functions their limits for
	// this request, in cs, and returns the RateLimit-Policy value with
	// those limits. It is called only for a plan with such windows
	// (Plan.Dynamic); an error should wrap ErrLimit.
	Limits(p *Plan, cs []engine.Check) (field string, err error)
	// Distinct returns the request's value for the group's distinct:
	// statement; called only for a group that has one.
	Distinct() string
}

// Admission is one request's life under a rule group, for every
// transport. Its steps run in this order, and this file reads in it:
//
//   - resolve: the caller's role and plan; an exempt caller passes, a
//     request without scope is refused;
//   - price: the request's checks, their subjects, costs and limits; a
//     request that cannot be priced, or costs more than a whole quota, is
//     refused;
//   - decide: the Decider's decision and its deciding window;
//   - respond: the Verdict the transport translates into its answer —
//     header or metadata values and a status — and the event hooks see;
//   - run: the transport runs its handler with Verdict.Context and
//     measures its Outcome;
//   - finish: Finish gives the request back, settles it and releases its
//     slots, through the one Finisher.
//
// Admit runs the first four, Finish the last. A transport keeps its
// Admission inside its own per-request value, which can stay on the
// stack: nothing keeps a pointer into it (Verdict.Values is a slice of
// its own, and the Source is the transport's, not the Admission's
// holder). The exported fields are for the transport to read after
// Admit.
type Admission struct {
	// HTTP is the net/http transport's request, which events carry; the
	// transport sets it before Admit.
	HTTP *http.Request

	Plan    *Plan
	Scope   string
	Checks  []engine.Check
	Field   string // the RateLimit-Policy value, with the request's limits
	Request engine.Request
	Decided
	Event   Event
	Verdict Verdict

	rules  *Rules
	src    Source
	ctx    context.Context
	id     role.Identity
	res    role.Resolution
	ip     string      // the client address's subject, once found
	report *CostReport // what the handler reports (Report), for a settled request
}

// Verdict is what Admit decided, for the transport to translate.
type Verdict struct {
	// Status is 0 when the handler runs (admitted, shadow mode, exempt or
	// uncounted), else the refusal as an HTTP status: 400 or 500 for a
	// request that could not be priced or decided, 429 for a full window
	// (or Never), 503 when Redis failed and the group fails closed.
	Status int
	// Never reports a 429 for a request costing more than a whole quota:
	// no wait admits it, so it has no Retry.
	Never bool
	// Policy is the RateLimit-Policy value to send; "" for none.
	Policy string
	// Values are the RateLimit values to send, one per advertised window:
	// a slice of their own, which the transport may keep (as an
	// http.Header value).
	Values []string
	// Retry is the wait a 429 or 503 advertises, in whole seconds.
	Retry int64
	// Quotas are, for a 429 with Transport.Quotas, the windows the
	// request does not fit in, the deciding one first.
	Quotas []Quota
	// Err is the error refused requests and hooks see; nil when all went
	// well.
	Err error
	// Finish reports that Admission.Finish has work: the transport must call it with
	// the handler's Outcome, however the handler ends.
	Finish bool
	// Context is the context the handler must run with, carrying the cost
	// report Report fills; nil for the request's own.
	Context context.Context
	// Written asks for the bytes of response the handler wrote
	// (Outcome.Written), which a settlement needs.
	Written bool
}

// Quota is an advertised window: Window (with its limit for the
// request) of Rule, named Name in the RateLimit fields, and the
// request's cost in it.
type Quota struct {
	Name   string
	Period string // the window's period as the rules write it, as in "1min"
	Rule   rules.Rule
	Window rules.Window
	Cost   int64
}

// Outcome is what the transport saw of the handler's run.
type Outcome struct {
	// Status is the handler's status as the group's count: statement
	// lists it: an HTTP status, or a gRPC code.
	Status int
	// Unknown reports a handler that panicked or took the connection: the
	// request stays counted at its estimate.
	Unknown bool
	// Written is the bytes of response the handler wrote, for a
	// settlement to the bytes written; negative when unknown.
	Written int64
}

// Admit runs the steps before the handler for a request with context ctx
// under r, whose transport-side values src gives, and returns the
// Verdict (also in a.Verdict). a must be zero but for HTTP.
func (a *Admission) Admit(ctx context.Context, r *Rules, src Source) Verdict {
	a.rules, a.src, a.ctx = r, src, ctx
	if a.resolve() && a.price() && a.decide() {
		a.respond()
	}
	a.src = nil // the source is the transport's request: do not keep it
	return a.Verdict
}

// resolve finds the caller's identity, role, plan and scope. An exempt
// caller (or one no rule applies to) passes uncounted; a request
// without a scope is a configuration error, refused with 500 (passed on
// in shadow mode).
func (a *Admission) resolve() bool {
	r := a.rules
	a.id, _ = role.FromContext(a.ctx)
	a.res = r.t.Policy.Resolve(r.group, a.id)
	a.Plan = r.planFor(a.res)
	a.Event = Event{Request: a.HTTP, Role: a.res.Role}
	if a.res.Exempt || a.Plan == nil || len(a.Plan.Rules) == 0 {
		a.Event.Exempt = true
		a.pass()
		return false
	}
	a.Event.Shadow = r.shadow
	if a.Scope = a.src.FindScope(); a.Scope == "" {
		attrs := []slog.Attr{}
		if a.HTTP != nil {
			attrs = append(attrs, slog.String("method", a.HTTP.Method), slog.String("path", a.HTTP.URL.Path))
		}
		r.t.Logger.LogAttrs(a.ctx, slog.LevelError, r.msg.noScope, attrs...)
		a.refuse(http.StatusInternalServerError, ErrNoScope)
		return false
	}
	a.Event.Scope = a.Scope
	return true
}

// price builds the request's checks: subjects, costs (each cost function
// called once), the group's block, the distinct value and the limits of
// limit functions. A cost or limit function that fails is refused with
// 400 or 500; a request costing more than a whole quota, which no later
// moment would admit, with a 429 without Retry, and the engine is not
// asked. Shadow mode passes both on, uncounted.
func (a *Admission) price() bool {
	r, p := a.rules, a.Plan
	a.Checks = a.checks()
	err := a.cost()
	a.Field = p.Field
	if err == nil && p.Dynamic {
		a.Field, err = a.src.Limits(p, a.Checks)
	}
	if err != nil {
		status, level, msg := http.StatusInternalServerError, slog.LevelError, r.msg.cost
		if errors.Is(err, ErrBadRequest) {
			status, level = http.StatusBadRequest, slog.LevelInfo
		}
		if errors.Is(err, ErrLimit) {
			msg = r.msg.limit
		}
		r.t.Logger.LogAttrs(a.ctx, level, msg,
			slog.String("scope", a.Scope), slog.Int("status", status), slog.Any("error", err))
		a.refuse(status, err)
		return false
	}
	pol, win := p.Oversized(a.Checks)
	if pol == nil {
		return true
	}
	lim := p.Rules[pol.Check]
	a.Event.Rule, a.Event.Policy, a.Event.Window = lim.ID(), pol.Name, win
	a.Decided.Policy = pol
	r.t.Logger.LogAttrs(a.ctx, slog.LevelInfo, r.msg.oversized,
		slog.String("scope", a.Scope), slog.String("policy", pol.Name))
	if !r.shadow {
		a.Verdict = Verdict{Never: true, Policy: a.Field,
			Quotas: []Quota{{Name: pol.Name, Period: pol.Period, Rule: lim, Window: win, Cost: max(1, a.Checks[pol.Check].Cost)}}}
	}
	a.refuse(http.StatusTooManyRequests, nil)
	return false
}

// checks returns the engine checks of the request: one per rule of the
// plan, in order, with its subject, its constant cost (Cost 0 for a cost
// of 1), the group's block and the distinct value.
func (a *Admission) checks() []engine.Check {
	r, p := a.rules, a.Plan
	cs := make([]engine.Check, len(p.Rules))
	block := Block(&r.group)
	var distinct string
	if r.distinct {
		distinct = a.src.Distinct()
	}
	for i, lim := range p.Rules {
		cs[i].Rule, cs[i].Block = lim, block
		var v string
		if named(lim.Kind) {
			v = a.src.Value(p, i, lim)
		}
		if cs[i].Subject = SubjectFor(lim.Kind, a.id.User, a.res.ByIP, v); cs[i].Subject == "" {
			cs[i].Subject = a.clientIP()
		}
		if c := p.costs[i]; c > 1 {
			cs[i].Cost = c
		}
		if distinct != "" && countsDistinct(lim) {
			cs[i].Distinct = distinct
		}
	}
	return cs
}

// clientIP returns the subject of the request's client address, found
// once.
func (a *Admission) clientIP() string {
	if a.ip == "" {
		addr, h := a.src.Peer()
		a.ip = a.rules.t.IP.Subject(addr, h)
	}
	return a.ip
}

// cost sets the cost of every check whose rule names a cost function,
// calling each function once. It fails with a *CostError.
func (a *Admission) cost() error {
	p, cs := a.Plan, a.Checks
	for i, lim := range p.Rules {
		if p.costs[i] >= 0 {
			continue
		}
		n, called := int64(0), false
		for j := range i {
			if p.costs[j] < 0 && p.Rules[j].Cost == lim.Cost {
				n, called = cs[j].Cost, true
				break
			}
		}
		if !called {
			var err error
			if n, err = a.src.Cost(p, i, lim.Cost); err != nil || n < 1 {
				return &CostError{Name: lim.Cost, Rule: lim.ID(), Cost: n, Err: err}
			}
		}
		cs[i].Cost = n
	}
	return nil
}

// decide asks the Decider and works out the deciding window and the
// advertised wait (none in shadow mode, which never refuses). Backend
// trouble is logged (the decision's source says how it was handled); a
// request the engine could not evaluate is refused with 500 outside
// shadow mode: a bug or a group the engine rejects, not a client over
// its limit, so 429 would lie.
func (a *Admission) decide() bool {
	r := a.rules
	a.Request = engine.Request{Scope: a.Scope, Checks: a.Checks, Fail: r.group.Fail, Zone: r.zone, Regional: r.group.Regional}
	start := time.Now()
	dec, err := r.t.Decider.Allow(a.ctx, a.Request)
	a.Decided = Decided{Decision: dec, Err: err, Latency: time.Since(start)}
	d := &a.Decided
	d.Items, d.Primary = a.Plan.Constrained(&d.Decision)
	ev := &a.Event
	if d.Primary >= 0 {
		ws := &d.Decision.Windows[d.Primary]
		if d.Policy = a.Plan.Lookup(ws.Check, ws.Window); d.Policy != nil {
			ev.Rule, ev.Policy, ev.Window = a.Plan.Rules[d.Policy.Check].ID(), d.Policy.Name, ws.Window
		}
	}
	if !dec.Allowed && !r.shadow {
		d.Retry = RetryAfterSeconds(dec.RetryAfter)
	}
	ev.Allowed, ev.RetryAfter, ev.Source, ev.Err, ev.Decision, ev.Latency = dec.Allowed, dec.RetryAfter, dec.Source, err, dec, d.Latency
	if err == nil {
		return true
	}
	if d.Invalid = errors.Is(err, engine.ErrInvalid); !d.Invalid {
		r.t.logBackend(a.ctx, a.Scope, &d.Decision, err)
		return true
	}
	r.t.Logger.LogAttrs(a.ctx, slog.LevelError, "slidelimit: engine rejected request",
		slog.String("scope", a.Scope), slog.Any("error", err))
	if r.shadow {
		return true
	}
	a.refuse(http.StatusInternalServerError, err)
	return false
}

// respond makes the Verdict of a decided request and emits its event. An
// admitted request, or any request in shadow mode, goes on to the handler
// with the RateLimit fields (none in shadow mode); a denial is a 429 with
// them, or a 503 with the policy alone when Redis failed and the group
// fails closed.
func (a *Admission) respond() {
	r, dec, v := a.rules, &a.Decision, &a.Verdict
	v.Err = a.Err
	switch {
	case r.shadow:
		if !dec.Allowed {
			r.t.Logger.LogAttrs(a.ctx, slog.LevelInfo, r.msg.shadow,
				slog.String("scope", a.Scope), slog.String("policy", a.Event.Policy),
				slog.Duration("retry_after", dec.RetryAfter), slog.String("source", dec.Source))
		}
		a.admitted()
		r.t.emit(a.Event)
		return
	case dec.Allowed:
		v.Policy, v.Values = a.Field, a.values(0)
		a.admitted()
		r.t.emit(a.Event)
		return
	}
	v.Policy, v.Retry = a.Field, a.Retry
	if dec.Source == "fail-closed" {
		v.Status = http.StatusServiceUnavailable
	} else {
		v.Status, v.Values = http.StatusTooManyRequests, a.values(a.Retry)
		if r.t.Quotas {
			v.Quotas = a.quotas()
		}
	}
	a.Event.Status = v.Status
	r.t.emit(a.Event)
}

// admitted prepares the steps after the handler of an admitted request:
// the Verdict asks for Finish when the group gives requests back, the plan
// holds slots or settles costs, and a settled request's handler gets a
// context to report its costs to.
func (a *Admission) admitted() {
	r, p, v := a.rules, a.Plan, &a.Verdict
	if !a.Decision.Allowed || r.finisher == nil {
		return
	}
	settles := p.Settles()
	v.Finish = r.counts != nil || p.Slots || settles
	if settles {
		v.Context, a.report = p.Reporting(a.ctx)
		v.Written = p.SettlesWritten()
	}
}

// values returns the RateLimit values of the decision's advertised
// windows, t capped at maxT seconds when positive: the one source of
// them for every transport.
func (a *Admission) values(maxT int64) []string {
	if len(a.Items) == 0 {
		return nil
	}
	vs := make([]string, 0, len(a.Items))
	for _, i := range a.Items {
		ws := a.Decision.Windows[i]
		if pol := a.Plan.Lookup(ws.Check, ws.Window); pol != nil {
			vs = append(vs, RateLimitField(pol.Name, ws, pol.Per, maxT))
		}
	}
	return vs
}

// quotas returns the windows a denied request does not fit in: the
// deciding one first, then every other whose remaining is below the
// request's cost.
func (a *Admission) quotas() []Quota {
	var qs []Quota
	cs, dec := a.Checks, &a.Decision
	add := func(ws engine.WindowState) {
		if pol := a.Plan.Lookup(ws.Check, ws.Window); pol != nil && ws.Check < len(cs) {
			qs = append(qs, Quota{Name: pol.Name, Period: pol.Period, Rule: a.Plan.Rules[ws.Check], Window: pol.Window, Cost: max(1, cs[ws.Check].Cost)})
		}
	}
	if a.Primary >= 0 {
		add(dec.Windows[a.Primary])
	}
	for i, ws := range dec.Windows {
		if i != a.Primary && ws.Check < len(cs) && ws.Remaining < max(1, cs[ws.Check].Cost) {
			add(ws)
		}
	}
	return qs
}

// pass lets the request through uncounted: an exempt caller, or a
// shadow-mode request that could not be priced or decided.
func (a *Admission) pass() {
	a.Event.Allowed = true
	a.rules.t.emit(a.Event)
	a.Verdict = Verdict{Err: a.Event.Err}
}

// refuse refuses the request with status because of err (nil for a full
// window), or passes it on uncounted in shadow mode, which never refuses.
func (a *Admission) refuse(status int, err error) {
	a.Event.Err = err
	if a.rules.shadow {
		a.pass()
		return
	}
	a.Event.Status = status
	a.rules.t.emit(a.Event)
	a.Verdict.Status, a.Verdict.Err = status, err
}

// run is the transport's: it runs the handler of a request whose Verdict
// has Status 0, with Verdict.Context when set, and measures its Outcome
// when Verdict.Finish asks for it — however the handler ends: normally,
// by panic, by hijack or after the client hung up — so that nothing the
// request holds outlives it.

// Finish is the last step, after the handler: it ends the admitted
// request with outcome o — gives it back (count:, the one give-back
// predicate Rules.givesBack), else settles it to its actual costs
// (Plan.Actual), and releases its slots — in one call of the Finisher,
// which queues the work and returns at once, so that no response waits
// for Redis after its handler. It does nothing unless Verdict.Finish.
func (a *Admission) Finish(o Outcome) {
	if !a.Verdict.Finish {
		return
	}
	out := engine.Outcome{GiveBack: a.rules.givesBack(o)}
	if !out.GiveBack && !o.Unknown {
		out.Actual = a.Plan.Actual(a.Checks, a.report, o.Written)
	}
	a.rules.finisher.FinishAsync(a.Decision, out)
}
