package slidelimit

import (
	"errors"
	"fmt"
	"net/http"
	"slices"
	"sync"

	"github.com/slidelimit/slidelimit/engine"
	"github.com/slidelimit/slidelimit/internal/access"
	"github.com/slidelimit/slidelimit/internal/overrides"
	"github.com/slidelimit/slidelimit/middleware"
	"github.com/slidelimit/slidelimit/rules"
)

// Limiter rate-limits handlers with rule groups, deciding in Redis. It holds
// one engine and the middleware configuration shared by every handler it
// wraps. A Limiter is safe for concurrent use.
type Limiter struct {
	engine *engine.Engine
	client engine.Client
	opts   []middleware.Option
	ident  func(*http.Request) (string, []string) // WithIdentity
	ov     *overrides.Store                       // nil with WithRulesCheck(0)
	masked []rules.Kind                           // WithMaskedSubjects

	mu        sync.RWMutex
	groups    []registered // what Peek and Reset search, in registration order
	throttles []*Throttle  // in creation order
}

// New returns a Limiter deciding with client, which may be a *redis.Client,
// *redis.ClusterClient, *redis.Ring or any redis.UniversalClient. It reads
// each server's memory settings (see engine.New) and the rule overrides in
// force (see SetRules) from Redis, waiting at most a second, and starts
// following their changes (see WithRulesCheck); a Redis that does not
// answer leaves the code's rules in force until it does. It fails when
// client is nil (also a typed nil) or an engine option is invalid, or with
// engine.WithRequireNoEviction when a server may evict its keys;
// middleware options are checked when a handler is wrapped, where errors
// can name the route.
//
// The Limiter does not own client: Close leaves it open.
func New(client engine.Client, opts ...Option) (*Limiter, error) {
	c := config{rulesCheck: DefaultRulesCheck}
	for _, o := range opts {
		if o != nil {
			o(&c)
		}
	}
	masked := []rules.Kind{rules.Header}
	if c.maskSet {
		masked = c.masked
	}
	for _, k := range masked {
		switch k {
		case rules.IP, rules.User, rules.Header, rules.Param, rules.Key:
		default:
			return nil, configError("", "", "", fmt.Errorf("WithMaskedSubjects: %q is not a kind of limiter with subjects (ip, user, header, param, key)", string(k)))
		}
	}
	e, err := engine.New(client, c.engine...)
	if err != nil {
		var oe *engine.OptionError
		if errors.As(err, &oe) {
			return nil, configError("", "", "", err)
		}
		return nil, err
	}
	l := &Limiter{engine: e, client: client, opts: c.middleware, ident: c.identity, masked: masked}
	if c.rulesCheck > 0 {
		l.ov = overrides.New(client, access.EnginePrefix(e), c.rulesCheck, access.EngineLogger(e))
		l.ov.Start()
	}
	return l, nil
}

// Engine returns the Limiter's engine, for decisions outside HTTP
// handlers.
func (l *Limiter) Engine() *engine.Engine { return l.engine }

// Close makes later decisions follow their fail mode, as if Redis were down;
// requests in flight complete. It stops following rule overrides (the ones
// in force stay). It does not close the Redis client. Close is idempotent.
func (l *Limiter) Close() error {
	if l.ov != nil {
		l.ov.Close()
	}
	l.mu.RLock()
	for _, t := range l.throttles {
		t.fleet.close()
	}
	l.mu.RUnlock()
	return l.engine.Close()
}

// Middleware returns middleware enforcing the rule group text, for routers
// other than http.ServeMux (chi, gorilla/mux, or the adapters of gin and
// echo). opts are applied after the options given to
// WithMiddlewareOptions.
//
// The windows' scope is, in order of precedence: the group's scope:
// statement, middleware.WithScope, middleware.WithScopeFunc, and
// http.Request.Pattern. Routers that do not set Pattern need one of the
// first three, for example for chi
//
//	middleware.WithScopeFunc(func(r *http.Request) string {
//		return chi.RouteContext(r.Context()).RoutePattern()
//	})
//
// or every request is answered with 500 and middleware.ErrNoScope is logged.
// param(name) limiters read http.Request.PathValue, which routers other
// than http.ServeMux may not set; use key(name) with middleware.WithKeyFunc
// instead.
func (l *Limiter) Middleware(rulesText string, opts ...middleware.Option) (func(http.Handler) http.Handler, error) {
	g, err := rules.Parse(rulesText)
	if err != nil {
		return nil, configError("", "", rulesText, err)
	}
	mw, err := l.wrapper(g, opts...)
	if err != nil {
		return nil, configErrors(g.Scope, "", rulesText, written(err, rulesText))
	}
	// The scope is known here only from a scope: statement; WithScope,
	// WithScopeFunc and the router's pattern are hidden in opts or decided
	// per request, so "" records the group as possibly in any scope.
	l.remember(g.Scope, g, opts)
	if g.Scope == "" || l.ov == nil {
		return func(next http.Handler) http.Handler { return identify(l.ident, mw(next)) }, nil
	}
	// With a scope: statement the handlers follow the scope's overrides.
	return func(next http.Handler) http.Handler {
		return identify(l.ident, l.follow(g.Scope, mw(next), next, opts))
	}, nil
}

// wrapper builds middleware for g with the Limiter's options and then opts.
func (l *Limiter) wrapper(g rules.Group, opts ...middleware.Option) (func(http.Handler) http.Handler, error) {
	return middleware.New(g, l.engine, append(slices.Clip(l.opts), opts...)...)
}
