package slidelimit

import (
	"errors"
	"fmt"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/slidelimit/slidelimit/engine"
	"github.com/slidelimit/slidelimit/internal/lifecycle"
	"github.com/slidelimit/slidelimit/internal/overrides"
	"github.com/slidelimit/slidelimit/internal/registry"
	"github.com/slidelimit/slidelimit/internal/rolecheck"
	"github.com/slidelimit/slidelimit/internal/tally"
	"github.com/slidelimit/slidelimit/internal/throttle"
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
	roles  *rolecheck.Check                       // the declared roles; nil when none are
	ov     *overrides.Store                       // nil with overrides off (tests)
	tally  *tally.Tallies                         // counting and writing unless off (tests)
	masked []rules.Kind                           // kinds the operator's page masks

	maxHold time.Duration // of a throttle's Permit's slots (WithMaxHold)
	transit time.Duration // a throttled call's transit bound (WithTransitBound)
	regions bool          // WithRegions: groups must be shareable (checkShared)

	reg *registry.Registry // what Peek and Reset search

	mu        sync.RWMutex
	throttles []*Throttle // in creation order
}

// New returns a Limiter deciding with client (a *redis.Client,
// *redis.ClusterClient, *redis.Ring or any redis.UniversalClient), which it
// does not own: Close leaves it open. It waits at most a second to read the
// servers' memory settings and the rule overrides in force; a Redis that
// does not answer leaves the code's rules in force until it does. Invalid
// options are a *ConfigError.
func New(client engine.Client, opts ...Option) (*Limiter, error) {
	c := config{rulesCheck: defaultRulesCheck, tallyFlush: tally.DefaultFlush}
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
			return nil, optionError(fmt.Errorf("masked subjects: %q is not a kind of rule with subjects (ip, user, header, param, key)", string(k)))
		}
	}
	if !c.transitSet {
		c.transit = throttle.DefaultTransit
	} else if c.transit < 0 {
		return nil, optionError(fmt.Errorf("transit bound: %s is negative", c.transit))
	}
	if !c.maxHoldSet {
		c.maxHold = throttle.DefaultMaxHold
	} else if c.maxHold <= 0 {
		return nil, optionError(fmt.Errorf("max hold: %s is not positive", c.maxHold))
	}
	if c.tallyFlush > 0 && (c.tallyFlush < tally.MinFlush || c.tallyFlush > tally.MaxFlush) {
		return nil, optionError(fmt.Errorf("tally flush: %s is not between %s and %s (or <= 0, off)", c.tallyFlush, tally.MinFlush, tally.MaxFlush))
	}
	var tallies *tally.Tallies // fed by the engine once New returns
	eopts := c.engine
	if c.tallyFlush > 0 {
		noted := engine.WithDenialHook(func(d engine.Denial) { tallies.Note(d) })
		// Last: the tallies' hook is the engine's one denial hook.
		eopts = append(slices.Clip(c.engine), noted)
	}
	e, err := engine.New(client, eopts...)
	if err != nil {
		if errors.Is(err, engine.ErrInvalid) {
			return nil, optionError(err)
		}
		return nil, err
	}
	// Before the Limiter is returned, so before the engine decides: its
	// denial hook reads tallies without a lock.
	tallies = tally.New(tally.Store{Client: client, Prefix: e.KeyPrefix(), Timeout: c.timeout, Log: e.Logger(), Down: e.Down})
	l := &Limiter{engine: e, client: client, opts: c.middleware, ident: c.identity, masked: masked, tally: tallies,
		maxHold: c.maxHold, transit: c.transit, roles: newRoleCheck(c.middleware), regions: c.regions}
	if c.tallyFlush > 0 {
		l.tally.Start(c.tallyFlush)
	}
	if c.rulesCheck > 0 {
		l.ov = overrides.New(client, e.KeyPrefix(), c.rulesCheck, e.Logger())
		l.ov.Start()
		l.reg = registry.New(c.middleware, l.ov)
	} else {
		l.reg = registry.New(c.middleware, nil)
	}
	return l, nil
}

// Close makes later decisions follow their fail mode, as if Redis were down;
// requests in flight complete. It stops following rule overrides (the ones
// in force stay), and writes the denial tallies a last time. It does not
// close the Redis client. Close is idempotent.
func (l *Limiter) Close() error {
	if l.ov != nil {
		l.ov.Close()
	}
	l.mu.RLock()
	for _, t := range l.throttles {
		t.t.Close()
	}
	l.mu.RUnlock()
	err := l.engine.Close()
	// After the engine: the denials of requests it completed are written.
	l.tally.Close()
	return err
}

// Middleware returns middleware enforcing the rule group text, for routers
// other than http.ServeMux; opts follow the Limiter's middleware options.
// Its scope is the group's scope: statement, else middleware.WithScope,
// middleware.WithScopeFunc or http.Request.Pattern; without any, requests
// are answered with 500 (see the package documentation, Other routers).
func (l *Limiter) Middleware(rulesText string, opts ...middleware.Option) (func(http.Handler) http.Handler, error) {
	g, err := rules.Parse(rulesText)
	if err != nil {
		return nil, configError("", "", rulesText, err)
	}
	mw, err := l.wrapper(g, opts...)
	if err != nil {
		return nil, configErrors(g.Scope, "", rulesText, lifecycle.Relocate(err, rulesText))
	}
	// The scope is known here only from a scope: statement; WithScope,
	// WithScopeFunc and the router's pattern are hidden in opts or decided
	// per request, so "" records the group as possibly in any scope.
	l.reg.Add(g.Scope, g, opts)
	if g.Scope == "" || l.ov == nil {
		return func(next http.Handler) http.Handler { return l.identify(mw(next)) }, nil
	}
	// With a scope: statement the handlers follow the scope's overrides.
	return func(next http.Handler) http.Handler {
		return l.identify(l.follow(g.Scope, mw(next), next, opts))
	}, nil
}

// wrapper builds middleware for g with the Limiter's options and then opts.
func (l *Limiter) wrapper(g rules.Group, opts ...middleware.Option) (func(http.Handler) http.Handler, error) {
	if l.regions {
		if err := checkShared(&g); err != nil {
			return nil, err
		}
	}
	return middleware.New(g, l.engine, append(slices.Clip(l.opts), opts...)...)
}
