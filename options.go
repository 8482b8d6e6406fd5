package slidelimit

import (
	"context"
	"log/slog"
	"net/http"
	"time"

	"github.com/slidelimit/slidelimit/engine"
	"github.com/slidelimit/slidelimit/middleware"
	"github.com/slidelimit/slidelimit/role"
	"github.com/slidelimit/slidelimit/rules"
)

// Option configures New. The options of this package cover what most
// services set; each one translates to the option of the engine or
// middleware package that owns the setting (see the package
// documentation, Configuration). Later options win.
type Option func(*config)

type config struct {
	engine     []engine.Option
	middleware []middleware.Option
	identity   func(*http.Request) (string, []string)
	rulesCheck time.Duration
	tallyFlush time.Duration
	timeout    time.Duration // WithTimeout's, for the tallies' writes
	masked     []rules.Kind
	maxHold    time.Duration
	maxHoldSet bool
	transit    time.Duration
	transitSet bool
	maskSet    bool
	regions    bool // WithRegions
}

func (c *config) mw(o middleware.Option) { c.middleware = append(c.middleware, o) }

// WithRoles declares the roles that exist. A rule group that names another
// role in exempt: or role(...)= then fails to register, SetRules rejects
// it, and AdminHandler refuses it. A caller whose identity holds another
// role is limited as one without it, and the role is logged once per
// value (at most 64 values). Without WithRoles role names are not checked,
// and a misspelt one is a role nobody holds.
func WithRoles(names ...string) Option {
	roles := make([]role.Role, len(names))
	for i, n := range names {
		roles[i] = role.Role(n)
	}
	return func(c *config) { c.mw(middleware.WithPolicy(role.Policy{Roles: roles})) }
}

// WithIdentity sets how the Limiter learns who made a request: fn returns
// the user id and roles the service's authentication established, or ""
// and nil for an anonymous caller. It runs on the request's goroutine,
// before the middleware, in every handler the Limiter wraps, and must be safe
// for concurrent use. Without it the identity is the one stored with
// role.NewContext.
func WithIdentity(fn func(r *http.Request) (user string, roles []string)) Option {
	return func(c *config) { c.identity = fn }
}

// WithLogger sets the logger of Redis errors, configuration errors found
// while serving, and would-be denials in shadow mode. The default is
// slog.Default() as it is when New runs; a nil l keeps it.
func WithLogger(l *slog.Logger) Option {
	return func(c *config) {
		if l == nil {
			return
		}
		c.engine = append(c.engine, engine.WithLogger(l))
		c.mw(middleware.WithLogger(l))
	}
}

// WithMaxHold sets the longest a throttle's Permit holds its slots of
// in-flight windows (N concurrent) without Finish; the default is 10
// minutes. Past it the slots are released, as Finish would release them,
// and a later Finish still settles the call's costs. Set it above the
// longest call a throttle admits (a stream, a download). d must be
// positive.
func WithMaxHold(d time.Duration) Option {
	return func(c *config) { c.maxHold, c.maxHoldSet = d, true }
}

// WithTransitBound sets the longest a throttled call takes from its
// admission to the upstream; the default is 50 ms. A throttle declared
// with an upstream's own limits then draws no 429 from it while calls
// arrive within d (docs/throttle.md, Transit bound). 0 means the upstream
// counts a call when it is sent. d must not be negative.
func WithTransitBound(d time.Duration) Option {
	return func(c *config) { c.transit, c.transitSet = d, true }
}

// WithFailMode sets how groups without a fail: statement decide while Redis
// fails: rules.FailLocal (the default: each process enforces the windows
// on its own), rules.FailOpen or rules.FailClosed.
func WithFailMode(m rules.FailMode) Option {
	return func(c *config) { c.engine = append(c.engine, engine.WithFailMode(m)) }
}

// WithKeyPrefix sets the prefix of every Redis key the Limiter writes; the
// default is "slidelimit:". Processes that share windows and rule
// overrides must use the same prefix.
func WithKeyPrefix(prefix string) Option {
	return func(c *config) { c.engine = append(c.engine, engine.WithKeyPrefix(prefix)) }
}

// WithTimeout bounds each Redis call of a decision; the default is 100 ms.
// A call that times out follows the fail
// mode.
func WithTimeout(d time.Duration) Option {
	return func(c *config) {
		c.engine = append(c.engine, engine.WithTimeout(d))
		c.timeout = d
	}
}

// WithHashedSubjects stores subjects (IPs, user ids, keys) in Redis as
// HMAC-SHA-256 digests keyed by secret, so that Redis holds no personal
// data. Every process sharing the windows must use the same secret; an
// empty secret is plain SHA-256, which hides little.
func WithHashedSubjects(secret []byte) Option {
	return func(c *config) { c.engine = append(c.engine, engine.WithHashedSubjects(secret)) }
}

// WithCostFunc registers fn as the cost function name, as in
// user[bytes]:2Gi/d: those rules count what fn returns for a request
// instead of 1. See middleware.WithCostFunc for its contract.
func WithCostFunc(name string, fn func(r *http.Request) (int64, error)) Option {
	return func(c *config) { c.mw(middleware.WithCostFunc(name, fn)) }
}

// WithKeyFunc registers fn as the subject of key(name) rules, such as a
// tenant id taken from a verified token. See middleware.WithKeyFunc for
// its contract.
func WithKeyFunc(name string, fn func(r *http.Request) string) Option {
	return func(c *config) { c.mw(middleware.WithKeyFunc(name, fn)) }
}

// WithLimitFunc registers fn as the limit function name, as in
// key(tenant):$quota/min, for requests and throttled calls alike. ctx is
// the request's context, or the one given to Wait or the Transport. See
// middleware.WithLimitFunc for its contract.
func WithLimitFunc(name string, fn func(ctx context.Context) (int64, error)) Option {
	return func(c *config) { c.mw(middleware.WithLimitFunc(name, fn)) }
}

// WithMaskedSubjects sets the kinds of rules whose subjects the
// operator's page (AdminHandler) shows, sends and logs only by a
// fingerprint. The default masks rules.Header; no kind masks nothing. New
// fails for a kind without subjects (docs/operations.md, Masked subjects).
func WithMaskedSubjects(kinds ...rules.Kind) Option {
	return func(c *config) { c.masked, c.maskSet = append([]rules.Kind(nil), kinds...), true }
}

// WithHook adds fn to the functions that receive an event for every
// decision, for metrics or tracing. Hooks run synchronously, in the order
// they were added, and must be fast and safe for concurrent use.
func WithHook(fn func(middleware.Event)) Option {
	return func(c *config) { c.mw(middleware.WithHook(fn)) }
}

// WithEngineOptions passes opts to [engine.New], for the engine settings
// this package has no option of its own for, such as
// engine.WithCachedDenials. It is the escape hatch; prefer the options
// above.
func WithEngineOptions(opts ...engine.Option) Option {
	return func(c *config) { c.engine = append(c.engine, opts...) }
}

// WithMiddlewareOptions adds opts to the options of every middleware the
// Limiter builds, for the settings this package has no option of its own
// for, such as middleware.WithTrustedProxies. It is the escape hatch;
// prefer the options above. Limiter.Peek and Limiter.Reset map subjects
// with them too.
func WithMiddlewareOptions(opts ...middleware.Option) Option {
	return func(c *config) { c.middleware = append(c.middleware, opts...) }
}
