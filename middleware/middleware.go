package middleware

import (
	"context"
	"errors"
	"net/http"

	"github.com/slidelimit/slidelimit/engine"
	"github.com/slidelimit/slidelimit/internal/lifecycle"
	"github.com/slidelimit/slidelimit/rules"
)

// Decider makes rate-limit decisions; *engine.Engine implements it. Allow
// must always return a usable Decision, with a non-nil error reporting
// backend trouble that the Decision's Source says how it was handled.
type Decider interface {
	Allow(ctx context.Context, req engine.Request) (engine.Decision, error)
}

// limiter is one configured middleware; it is immutable after New and safe
// for concurrent use. A request's life is its rules' (lifecycle.Rules),
// which the limiter translates from and to net/http.
type limiter struct {
	t        lifecycle.Transport
	rules    *lifecycle.Rules
	scope    string
	scopeFn  scopeFunc
	legacy   bool
	denied   deniedHandler
	keys     map[string]keyFunc
	costs    map[string]costFunc
	limits   map[string]limitFunc
	distinct keyFunc // the value of distinct:NAME; nil without
}

// New returns middleware that limits the requests of the next handler by
// group g, deciding with d. It fails, listing every problem at once, when g
// is not valid (see rules.Group.Validate), an option is invalid, a
// key(name) rule of g (including its role rules) has no function
// registered with WithKeyFunc, a rule's cost names no function
// registered with WithCostFunc, a window's limit ($name) names no
// function registered with WithLimitFunc, or g names a role that the
// WithPolicy policy does not declare (role.Policy.Roles).
//
// For each request the middleware:
//
//   - takes the caller's identity from the request context (role.FromContext;
//     never from a client header) and resolves it against g and the
//     WithPolicy policy (see package role for the precedence);
//   - passes an exempt request (or one to which no rule applies) straight
//     to next, without calling d;
//   - otherwise calls the cost functions the rules name, each once, and
//     d.Allow once with a Check per rule carrying its cost
//     (engine.Check.Cost), and passes the request on, answers 429, or
//     answers 503 when Redis failed and the fail mode is closed. A cost
//     function that fails is answered with 400 or 500 without calling d
//     (see WithCostFunc).
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
	c := configOf(opts)
	l := &limiter{t: lifecycle.Transport{Noun: "request"}, scope: g.Scope, scopeFn: c.scopeFunc, legacy: c.legacy,
		denied: c.denied, keys: c.keys, costs: c.costs, limits: c.limits}
	errs := c.shared(&l.t)
	// Groups from rules.Parse are valid already; a hand-built one is checked
	// here so that a bad window fails New rather than every request.
	if err := g.Validate(); err != nil {
		errs = append(errs, err)
	} else if err := c.policy.Check(g); err != nil {
		errs = append(errs, err) // a role WithPolicy does not declare
	}
	if d == nil {
		errs = append(errs, &ConfigError{Kind: kindDecider, Reason: "nil decider"})
	} else {
		l.t.Decider = d // a nil Decider must stay a nil interface
	}
	if l.scope == "" {
		l.scope = c.scope
	}
	if l.denied == nil {
		l.denied = WriteProblem
	}
	zone, zerr := loadZone(&g)
	var derr error
	l.distinct, derr = distinctFunc(&g, c.keys)
	errs = append(errs, zerr, derr)
	var rerrs []error
	count := g.Count
	l.rules, rerrs = lifecycle.NewRules(&l.t, g, zone, func(status int) bool { return lifecycle.Counts(count, status) }, l.addPlan)
	errs = append(errs, rerrs...)
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return l, nil
}

func (l *limiter) wrap(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { l.serve(w, r, next) })
}
