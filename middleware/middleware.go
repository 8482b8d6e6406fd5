package middleware

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"time"

	"github.com/slidelimit/slidelimit/engine"
	"github.com/slidelimit/slidelimit/internal/lifecycle"
	"github.com/slidelimit/slidelimit/internal/logthrottle"
	"github.com/slidelimit/slidelimit/role"
	"github.com/slidelimit/slidelimit/rules"
)

// Decider makes rate-limit decisions; *engine.Engine implements it. Allow
// must always return a usable Decision, with a non-nil error reporting
// backend trouble that the Decision's Source says how it was handled.
type Decider interface {
	Allow(ctx context.Context, req engine.Request) (engine.Decision, error)
}

// limiter is one configured middleware; it is immutable after New and safe
// for concurrent use.
type limiter struct {
	group    rules.Group
	decider  Decider
	giver    GiveBacker // d as a GiveBacker, for a group with count:
	settler  Settler    // d as a Settler, with WithSettle
	releaser Releaser   // d as a Releaser, for a group with an in-flight window
	policy   role.Policy
	ip       lifecycle.ClientIP
	scope    string
	scopeFn  ScopeFunc
	logger   *slog.Logger
	hooks    []func(Event)
	legacy   bool
	denied   DeniedHandler
	defaults *plan
	byRole   map[string]*plan
	keys     map[string]KeyFunc
	costs    map[string]CostFunc
	limits   map[string]LimitFunc
	zone     *time.Location // of calendar windows (calendar:ZONE), UTC by default
	distinct KeyFunc        // the value of distinct:NAME; nil without

	// backendLog keeps backend errors, which come with every request of an
	// outage, to one warning per backendLogEvery.
	backendLog logthrottle.Throttle
}

// backendLogEvery is the least time between two warnings about backend
// errors of one handler's middleware.
const backendLogEvery = 10 * time.Second

// New returns middleware that limits the requests of the next handler by
// group g, deciding with d. It fails, listing every problem at once, when g
// is not valid (see rules.Group.Validate), an option is invalid, a
// key(name) limiter of g (including its overrides) has no function
// registered with WithKeyFunc, a limiter's cost names no function
// registered with WithCostFunc, a window's limit ($name) names no
// function registered with WithLimitFunc, or g names a role that the
// WithPolicy policy does not declare (role.Policy.Roles).
//
// For each request the middleware:
//
//   - takes the caller's identity from the request context (role.FromContext;
//     never from a client header) and resolves it against g and the
//     WithPolicy policy (see package role for the precedence);
//   - passes an exempt request (or one to which no limiter applies) straight
//     to next, without calling d;
//   - otherwise calls the cost functions the limiters name, each once, and
//     d.Allow once with a Check per limiter carrying its cost
//     (engine.Check.Cost), and passes the request on, answers 429, or
//     answers 503 when Redis failed and the fail mode is closed. A cost
//     function that fails is answered with 400 or 500 without calling d
//     (see CostFunc).
//
// Subjects and scopes are described in the package documentation. The
// returned function and the handlers it makes are safe for concurrent use.
func New(g rules.Group, d Decider, opts ...Option) (func(http.Handler) http.Handler, error) {
	l, err := newLimiter(g, d, opts...)
	if err != nil {
		return nil, err
	}
	return l.wrap, nil
}

func newLimiter(g rules.Group, d Decider, opts ...Option) (*limiter, error) {
	c := defaultConfig()
	for _, o := range opts {
		if o != nil {
			o(&c)
		}
	}
	errs := c.errs
	// Groups from rules.Parse are valid already; a hand-built one is checked
	// here so that a bad window fails New rather than every request.
	if err := g.Validate(); err != nil {
		errs = append(errs, err)
	} else if err := c.policy.Check(g); err != nil {
		errs = append(errs, err) // a role WithPolicy does not declare
	}
	if d == nil {
		errs = append(errs, ErrNilDecider)
	}
	giver := needs[GiveBacker](d, len(g.Count) > 0, ErrNoGiveBack, &errs)
	releaser := needs[Releaser](d, lifecycle.HoldsSlots(&g), ErrNoRelease, &errs)
	settler := needs[Settler](d, len(c.settle) > 0, ErrNoSettle, &errs)
	l := &limiter{
		group:    g,
		decider:  d,
		giver:    giver,
		settler:  settler,
		releaser: releaser,
		policy:   c.policy,
		ip:       lifecycle.ClientIP{Header: c.proxyHeader, V6Bits: c.ipv6Prefix},
		scope:    g.Scope,
		scopeFn:  c.scopeFunc,
		logger:   c.logger,
		hooks:    c.hooks,
		legacy:   c.legacy,
		denied:   c.denied,
		byRole:   make(map[string]*plan, len(g.Overrides)),
		keys:     c.keys,
		costs:    c.costs,
		limits:   c.limits,

		backendLog: logthrottle.Throttle{Every: backendLogEvery},
	}
	if l.scope == "" {
		l.scope = c.scope
	}
	if l.denied == nil {
		l.denied = WriteProblem
	}
	var zerr, derr error
	l.zone, zerr = loadZone(&g)
	l.distinct, derr = distinctFunc(&g, c.keys)
	errs = append(errs, zerr, derr)
	var terrs []error
	l.ip.Trusted, terrs = c.trustedPrefixes()
	errs = append(errs, terrs...)
	errs = append(errs, l.addPlans(&c)...)
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return l, nil
}

// needs returns d as a T, a step the group needs of its decider (need),
// adding missing to errs when d cannot take it; the zero T when the group
// does not need it or d is nil.
func needs[T any](d Decider, need bool, missing error, errs *[]error) T {
	var zero T
	if d == nil || !need {
		return zero
	}
	t, ok := d.(T)
	if !ok {
		*errs = append(*errs, missing)
	}
	return t
}

// addPlans makes the plan of the group's default limiters and of each
// role's override, and returns what failed.
func (l *limiter) addPlans(c *config) []error {
	var errs []error
	for role, ls := range l.group.LimiterLists() {
		if _, dup := l.byRole[role]; dup && role != "" {
			continue // Resolve picks the first override of a role
		}
		p, err := newPlan(role, ls, c.keys, c.costs, c.limits)
		switch {
		case err != nil:
			errs = append(errs, err)
			continue
		case role == "":
			l.defaults = p
		default:
			l.byRole[role] = p
		}
		p.SettleWith(c.settle)
	}
	return errs
}

func (l *limiter) wrap(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { l.serve(w, r, next) })
}

// planFor returns the plan of a resolution.
func (l *limiter) planFor(res role.Resolution) *plan {
	if res.Role == "" {
		return l.defaults
	}
	if p, ok := l.byRole[string(res.Role)]; ok {
		return p
	}
	// Unreachable with role.Policy, which only returns roles of the group's
	// overrides; an ad hoc plan keeps serving correct if that changes.
	p, err := newPlan(string(res.Role), res.Limiters, l.keys, l.costs, l.limits)
	if err != nil {
		return l.defaults
	}
	return p
}

// scopeOf returns the scope of r, in order of precedence: the group's
// scope: statement, WithScope, WithScopeFunc, and the pattern the router
// matched (http.Request.Pattern).
func (l *limiter) scopeOf(r *http.Request) string {
	if l.scope != "" {
		return l.scope
	}
	if l.scopeFn != nil {
		if s := l.scopeFn(r); s != "" {
			return s
		}
	}
	return r.Pattern
}

// refuseOversized answers a request whose own cost is above the limit of
// pol's window: no later moment would admit it, so it gets a 429 without
// Retry-After, and the engine is not asked. In shadow mode the handler
// answers, uncounted.
func (l *limiter) refuseOversized(w http.ResponseWriter, r *http.Request, next http.Handler, c *call, pol *lifecycle.Policy, win rules.Window, ev Event) {
	p := c.p
	lim := p.Limiters[pol.Check]
	ev.Limiter, ev.Policy, ev.Window = lim.ID(), pol.Name, win
	l.logger.LogAttrs(r.Context(), slog.LevelInfo, "slidelimit: request costs more than a whole quota",
		slog.String("scope", ev.Scope), slog.String("policy", pol.Name))
	if ev.Shadow {
		ev.Allowed = true
		l.emit(ev)
		next.ServeHTTP(w, r)
		return
	}
	if c.field != "" {
		w.Header().Add(headerPolicy, c.field)
	}
	ev.Status = http.StatusTooManyRequests
	l.emit(ev)
	l.denied(w, r, Denial{Status: http.StatusTooManyRequests, Never: true, Scope: ev.Scope,
		Policy: pol.Name, Limiter: ev.Limiter, Window: win, Cost: lim.Cost})
}

// checks builds the engine checks of a request, as every transport does
// (lifecycle.Plan.Checks): subjects from the caller, the client address,
// headers, path values and key functions; constant costs; the group's
// block.
func (l *limiter) checks(r *http.Request, id role.Identity, res role.Resolution, p *plan) []engine.Check {
	cs := p.Checks(&l.group, id, res, &subjects{l: l, r: r, p: p})
	if l.distinct != nil {
		setDistinct(cs, l.distinct(r))
	}
	return cs
}

// subjects is the lifecycle.SubjectSource of an HTTP request: it finds
// the client address at most once, and only when a limiter needs it.
type subjects struct {
	l    *limiter
	r    *http.Request
	p    *plan
	addr string
}

// ClientIP implements lifecycle.SubjectSource.
func (s *subjects) ClientIP() string {
	if s.addr == "" {
		s.addr = s.l.ip.Subject(s.r.RemoteAddr, s.r.Header)
	}
	return s.addr
}

// Value implements lifecycle.SubjectSource.
func (s *subjects) Value(i int, lim rules.Limiter) string {
	switch lim.Kind {
	case rules.Header:
		return s.r.Header.Get(lim.Name)
	case rules.Param:
		return s.r.PathValue(lim.Name)
	case rules.Key:
		return s.p.keys[i](s.r)
	}
	return ""
}

// setFields adds the RateLimit-Policy field (the plan's, or its resolved
// limits' for a plan with limit functions) and a RateLimit member for each
// of items, indexes in dec.Windows (see plan.constrained), and sets legacy
// fields for the first if enabled. maxT caps the effective window at the
// Retry-After value. The RateLimit fields are added, not set, so that
// nested middlewares (a router-wide limit around a route's own) each
// contribute their list members, as the draft allows a list to span field
// lines.
func (l *limiter) setFields(h http.Header, field string, p *plan, dec *engine.Decision, items []int, maxT int64) {
	if field != "" {
		h.Add(headerPolicy, field)
	}
	for k, i := range items {
		ws := dec.Windows[i]
		pol := p.Lookup(ws.Check, ws.Window)
		h.Add(headerRateLimit, lifecycle.RateLimitField(pol.Name, ws, pol.Per, maxT))
		if k == 0 && l.legacy {
			setLegacy(h, ws, pol.Per)
		}
	}
}

// priceChecks sets the cost of every check from its limiter's cost,
// calling each cost function the plan names once. It fails with a
// *CostError.
func (l *limiter) priceChecks(r *http.Request, p *plan, cs []engine.Check) error {
	var called map[string]int64
	for i := range cs {
		c := p.costs[i]
		if c.fn == nil {
			if c.n > 1 {
				cs[i].Cost = c.n
			}
			continue
		}
		n, ok := called[c.name]
		if !ok {
			var err error
			n, err = c.fn(r)
			if err != nil || n < 1 {
				return &CostError{Name: c.name, Limiter: p.Limiters[i].ID(), Cost: n, Err: err}
			}
			if called == nil {
				called = make(map[string]int64, 1)
			}
			called[c.name] = n
		}
		cs[i].Cost = n
	}
	return nil
}

func (l *limiter) emit(ev Event) {
	for _, h := range l.hooks {
		h(ev)
	}
}

// logBackend logs a backend error: at most one warning per
// backendLogEvery, carrying the number of errors held back since the last
// one (hooks see every request's error in its Event). An error of a request
// whose client went away is logged at debug level, not throttled.
func (l *limiter) logBackend(r *http.Request, scope string, dec engine.Decision, err error) {
	if r.Context().Err() != nil {
		// The client went away; the backend error is a consequence.
		l.logger.LogAttrs(r.Context(), slog.LevelDebug, "slidelimit: rate-limit backend error",
			slog.String("scope", scope), slog.String("source", dec.Source.String()),
			slog.Bool("allowed", dec.Allowed), slog.Any("error", err))
		return
	}
	ok, held := l.backendLog.Allow(time.Now())
	if !ok {
		return
	}
	l.logger.LogAttrs(r.Context(), slog.LevelWarn, "slidelimit: rate-limit backend error",
		slog.String("scope", scope), slog.String("source", dec.Source.String()),
		slog.Bool("allowed", dec.Allowed), slog.Any("error", err),
		slog.Int64("errors_not_logged", held))
}
