package middleware

import (
	"net/netip"

	"log/slog"
	"net/http"
	"strconv"

	"github.com/slidelimit/slidelimit/internal/lifecycle"
	"github.com/slidelimit/slidelimit/role"
)

// The functions the options register, by what they return.
type (
	keyFunc   = func(r *http.Request) string
	costFunc  = func(r *http.Request) (int64, error)
	scopeFunc = func(r *http.Request) string
)

// Option configures New. A slidelimit.Limiter gives the options passed
// to slidelimit.WithMiddlewareOptions to every middleware it builds, and
// contrib/grpclimit takes those every transport shares (WithTrustedProxies,
// WithProxyHeader, WithIPv6Prefix, WithPolicy, WithSettle, WithLogger,
// WithHook) through its WithMiddlewareOptions.
type Option func(*config)

type config struct {
	trusted     []string
	proxyHeader lifecycle.ProxyHeader
	ipv6Prefix  int
	policy      role.Policy
	keys        map[string]keyFunc
	costs       map[string]costFunc
	limits      map[string]limitFunc
	settle      map[string]lifecycle.Settle
	logger      *slog.Logger
	hooks       []func(Event)
	legacy      bool
	denied      deniedHandler
	scope       string
	scopeFunc   scopeFunc
	errs        []error
	httpOnly    []string // the net/http options given, which other transports refuse
}

func defaultConfig() config {
	return config{
		ipv6Prefix: lifecycle.DefaultIPv6Prefix,
		logger:     slog.Default(),
	}
}

func (c *config) fail(option, value, reason string) {
	c.errs = append(c.errs, &ConfigError{Kind: kindOption, Option: option, Name: value, Reason: reason})
}

// WithTrustedProxies makes the middleware believe the proxy header (see
// WithProxyHeader) of requests whose peer address is in one of cidrs, given
// as prefixes ("10.0.0.0/8", "2001:db8::/32") or single addresses
// ("192.0.2.1"). By default no proxy is trusted and the client is always the
// peer (http.Request.RemoteAddr): a proxy header from an untrusted peer is
// never believed. IPv4-mapped IPv6 addresses match as IPv4, and the zone of
// an address ("fe80::1%eth0") is ignored. Later calls add to the list. An
// unparsable entry makes New fail.
func WithTrustedProxies(cidrs ...string) Option {
	return func(c *config) { c.trusted = append(c.trusted, cidrs...) }
}

// WithProxyHeader sets the header that trusted proxies write the client
// address to: "X-Forwarded-For" (the default) or "Forwarded" (RFC 7239,
// its for= parameters). Configure the one your proxies set: the other is
// passed through from the client and could be spoofed.
func WithProxyHeader(name string) Option {
	return func(c *config) {
		switch http.CanonicalHeaderKey(name) {
		case "X-Forwarded-For":
			c.proxyHeader = lifecycle.XForwardedFor
		case "Forwarded":
			c.proxyHeader = lifecycle.Forwarded
		default:
			c.fail("WithProxyHeader", name, `unknown proxy header; want "X-Forwarded-For" or "Forwarded"`)
		}
	}
}

// WithIPv6Prefix sets the prefix length, in bits from 1 to 128, by which
// IPv6 clients are grouped; the default is 64, the smallest network an ISP
// normally hands to one subscriber. 128 counts single addresses. IPv4
// clients, including IPv4-mapped IPv6 addresses, are always counted by
// single address.
func WithIPv6Prefix(bits int) Option {
	return func(c *config) {
		if bits < 1 || bits > 128 {
			c.fail("WithIPv6Prefix", strconv.Itoa(bits), "prefix length must be 1 to 128")
			return
		}
		c.ipv6Prefix = bits
	}
}

// WithPolicy sets the service-wide role policy applied with each group, such
// as the roles whose user rules count by IP. The default is the zero
// Policy.
func WithPolicy(p role.Policy) Option {
	return func(c *config) { c.policy = p }
}

// WithKeyFunc registers fn as the subject of key(name) rules. Every
// key(name) of a group must have a function when New is called, or New fails
// with a *ConfigError. fn returns the subject, such as a tenant id taken
// from a verified token; "" counts the request by client IP. It is called
// on the request's goroutine. Registering a name again replaces fn.
func WithKeyFunc(name string, fn func(r *http.Request) string) Option {
	return func(c *config) {
		c.httpOnly = append(c.httpOnly, "WithKeyFunc")
		if fn == nil {
			c.fail("WithKeyFunc", name, "nil key function")
			return
		}
		if c.keys == nil {
			c.keys = make(map[string]keyFunc)
		}
		c.keys[name] = fn
	}
}

// WithCostFunc registers fn as the cost function name: every rule whose
// cost is name, as in user[bytes]:2Gi/d, counts what fn returns for the
// request instead of 1. fn is called before the handler, at most once per
// request and name, and must return at least 1; an error wrapping
// ErrBadRequest is answered with 400, any other error or cost with 500.
// Every cost function a group names must be registered when New is called
// (a *ConfigError otherwise). name is a letter, then letters, digits, '_',
// '-' or '.'. Registering a name again replaces fn.
func WithCostFunc(name string, fn func(r *http.Request) (int64, error)) Option {
	return func(c *config) { registerFunc(c, &c.costs, "WithCostFunc", "cost", name, fn, fn == nil) }
}

// registerFunc adds fn, a function the rule text names (a cost or limit
// function), under name to *m for option opt; isNil says whether fn is nil.
func registerFunc[F any](c *config, m *map[string]F, opt, kind, name string, fn F, isNil bool) {
	c.httpOnly = append(c.httpOnly, opt)
	switch {
	case isNil:
		c.fail(opt, name, "nil "+kind+" function")
		return
	case !lifecycle.ValidCostName(name):
		c.fail(opt, name, "invalid "+kind+` function name; want a letter, then letters, digits, "_", "-" or "."`)
		return
	}
	if *m == nil {
		*m = make(map[string]F)
	}
	(*m)[name] = fn
}

// WithLogger sets the logger that receives backend errors (Warn; at most
// one line per 10 s per wrapped handler, carrying the number of errors not
// logged since, so that an outage does not log a line per request; hooks
// see every error), would-be denials in shadow mode (Info) and
// configuration errors found while serving (Error). The default is
// slog.Default() as it is when New runs. Errors are never written to
// clients.
func WithLogger(l *slog.Logger) Option {
	return func(c *config) {
		if l != nil {
			c.logger = l
		}
	}
}

// WithHook adds fn to the functions that receive an Event for every request
// the middleware sees, exempt ones included, for metrics or tracing. Hooks run
// synchronously on the request's goroutine, in the order they were added,
// before the response is written; they must be fast and safe for concurrent
// use.
func WithHook(fn func(Event)) Option {
	return func(c *config) {
		if fn != nil {
			c.hooks = append(c.hooks, fn)
		}
	}
}

// WithLegacyHeaders adds X-RateLimit-Limit, X-RateLimit-Remaining and
// X-RateLimit-Reset (delay in whole seconds, rounded up) for the most
// constrained window to every limited response, for clients that predate the
// RateLimit fields. They are off by default.
func WithLegacyHeaders() Option {
	return func(c *config) { c.legacy, c.httpOnly = true, append(c.httpOnly, "WithLegacyHeaders") }
}

// WithDeniedHandler replaces the response written when a request is denied
// (429) or refused because Redis failed and the fail mode is closed (503).
// The rate-limit fields and Retry-After are set before h is called; h writes
// the status and body. The default is WriteProblem.
func WithDeniedHandler(h func(w http.ResponseWriter, r *http.Request, d Denial)) Option {
	return func(c *config) {
		c.httpOnly = append(c.httpOnly, "WithDeniedHandler")
		if h != nil {
			c.denied = h
		}
	}
}

// WithScope sets the scope of the windows for groups that declare no scope:
// every handler wrapped with the same scope and rule shares its windows.
// A group's own scope: statement takes precedence.
func WithScope(scope string) Option {
	return func(c *config) { c.scope, c.httpOnly = scope, append(c.httpOnly, "WithScope") }
}

// WithScopeFunc sets a function that returns the scope of each request, for
// routers that do not set http.Request.Pattern, such as
// chi.RouteContext(r.Context()).RoutePattern. It is used when neither the
// group nor WithScope sets a scope; when it returns "", r.Pattern is used.
// fn must return the same scope for every request that should share
// windows, so not the raw URL path.
func WithScopeFunc(fn func(r *http.Request) string) Option {
	return func(c *config) { c.scopeFunc, c.httpOnly = fn, append(c.httpOnly, "WithScopeFunc") }
}

// trustedPrefixes parses the WithTrustedProxies entries of c.
func (c *config) trustedPrefixes() ([]netip.Prefix, []error) {
	var ps []netip.Prefix
	var errs []error
	for _, s := range c.trusted {
		p, err := lifecycle.ParseTrusted(s)
		if err != nil {
			errs = append(errs, &ConfigError{Kind: kindOption, Option: "WithTrustedProxies", Name: s, Reason: "not an IP address or CIDR prefix"})
			continue
		}
		ps = append(ps, p)
	}
	return ps, errs
}
