package slidelimit

import (
	"log/slog"
	"time"

	"github.com/slidelimit/slidelimit/engine"
	"github.com/slidelimit/slidelimit/middleware"
	"github.com/slidelimit/slidelimit/role"
	"github.com/slidelimit/slidelimit/rules"
)

// Option configures New.
type Option func(*config)

type config struct {
	engine     []engine.Option
	middleware []middleware.Option
}

func (c *config) mw(o middleware.Option) { c.middleware = append(c.middleware, o) }

// WithEngineOptions passes opts to engine.New, for engine settings without
// an option of their own here, such as engine.WithHashSubjects.
func WithEngineOptions(opts ...engine.Option) Option {
	return func(c *config) { c.engine = append(c.engine, opts...) }
}

// WithMiddlewareOptions adds opts to the options of every middleware the
// Limiter builds.
func WithMiddlewareOptions(opts ...middleware.Option) Option {
	return func(c *config) { c.middleware = append(c.middleware, opts...) }
}

// WithPrefix sets the string every Redis key starts with; the default is
// engine.DefaultPrefix. Every process sharing windows must use the same
// prefix.
func WithPrefix(prefix string) Option {
	return WithEngineOptions(engine.WithPrefix(prefix))
}

// WithTimeout bounds each Redis call; the default is engine.DefaultTimeout.
// When it passes, the group's fail mode decides.
func WithTimeout(d time.Duration) Option {
	return WithEngineOptions(engine.WithTimeout(d))
}

// WithFailMode sets the fail mode of groups without a fail: statement; the
// default is rules.FailLocal (see engine.WithFailMode).
func WithFailMode(m rules.FailMode) Option {
	return WithEngineOptions(engine.WithFailMode(m))
}

// WithNode sets the engine's snowflake node number, 0 to 1023; the default
// is random. Distinct nodes per process avoid a rare retry in Redis (see
// engine.WithNode).
func WithNode(node int64) Option {
	return WithEngineOptions(engine.WithNode(node))
}

// WithLogger sets the logger of the engine and the middleware; the default
// discards everything.
func WithLogger(l *slog.Logger) Option {
	return func(c *config) {
		if l == nil {
			return
		}
		c.engine = append(c.engine, engine.WithLogger(l))
		c.mw(middleware.WithLogger(l))
	}
}

// WithTrustedProxies makes the middleware read the client address from the
// proxy header of requests whose peer is in cidrs; by default the peer is
// always the client. See middleware.WithTrustedProxies.
func WithTrustedProxies(cidrs ...string) Option {
	return func(c *config) { c.mw(middleware.WithTrustedProxies(cidrs...)) }
}

// WithProxyHeader sets the header trusted proxies write the client address
// to; the default is middleware.XForwardedFor.
func WithProxyHeader(h middleware.ProxyHeader) Option {
	return func(c *config) { c.mw(middleware.WithProxyHeader(h)) }
}

// WithIPv6Prefix sets the prefix length by which IPv6 clients are grouped;
// the default is middleware.DefaultIPv6Prefix (64).
func WithIPv6Prefix(bits int) Option {
	return func(c *config) { c.mw(middleware.WithIPv6Prefix(bits)) }
}

// WithPolicy sets the service-wide role policy, such as the roles whose user
// limiters count by IP; the default is the zero role.Policy.
func WithPolicy(p role.Policy) Option {
	return func(c *config) { c.mw(middleware.WithPolicy(p)) }
}

// WithKeyFunc registers fn as the subject of key(name) limiters. A group
// using key(name) without a function fails to register.
func WithKeyFunc(name string, fn middleware.KeyFunc) Option {
	return func(c *config) { c.mw(middleware.WithKeyFunc(name, fn)) }
}

// WithCostFunc registers fn as the cost function name, counted by limiters
// such as user[bytes]:2Gi/d instead of 1 per request (see
// middleware.WithCostFunc). A group naming a cost function that is not
// registered fails to register.
func WithCostFunc(name string, fn middleware.CostFunc) Option {
	return func(c *config) { c.mw(middleware.WithCostFunc(name, fn)) }
}

// WithHook adds fn to the functions receiving a middleware.Event for every
// request, for metrics and tracing. Hooks run synchronously on the request's
// goroutine and must be safe for concurrent use.
func WithHook(fn func(middleware.Event)) Option {
	return func(c *config) { c.mw(middleware.WithHook(fn)) }
}

// WithLegacyHeaders adds X-RateLimit-Limit, X-RateLimit-Remaining and
// X-RateLimit-Reset to limited responses. They are off by default.
func WithLegacyHeaders() Option {
	return func(c *config) { c.mw(middleware.WithLegacyHeaders()) }
}

// WithDeniedHandler replaces the 429 and 503 responses; the default is
// middleware.WriteProblem.
func WithDeniedHandler(h middleware.DeniedHandler) Option {
	return func(c *config) { c.mw(middleware.WithDeniedHandler(h)) }
}
