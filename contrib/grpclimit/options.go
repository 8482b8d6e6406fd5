package grpclimit

import (
	"context"
	"log/slog"
	"strconv"
	"strings"

	"github.com/slidelimit/slidelimit/middleware"
	"github.com/slidelimit/slidelimit/role"
)

// KeyFunc returns the subject a key(name) limiter counts a call under, such
// as a tenant id the service's authentication put in the context. An
// empty result counts the call by client IP, as in the HTTP middleware. It
// is called on the call's goroutine before the handler and must be safe
// for concurrent use.
type KeyFunc func(ctx context.Context) string

// CostFunc returns what a call counts in the windows of the limiters whose
// cost names it, as in user[rows]:1M/d. fullMethod is the method called;
// req is the request message of a unary call and nil for a stream, which
// is costed at its start. It is called before the handler, at most once
// per call and name, and must be safe for concurrent use. It must return a
// cost of at least 1. An error wrapping middleware.ErrCostBadRequest is
// answered with codes.InvalidArgument, any other error or a cost below 1
// with codes.Internal; the error is logged, never sent to the client.
type CostFunc func(ctx context.Context, fullMethod string, req any) (int64, error)

// Option configures New.
type Option func(*config)

type config struct {
	defaults    string
	hasDefaults bool
	exempt      []string
	policy      role.Policy
	trusted     []string
	proxyHeader middleware.ProxyHeader
	v6bits      int
	keys        map[string]KeyFunc
	costs       map[string]CostFunc
	settle      map[string]middleware.Settlement
	logger      *slog.Logger
	hooks       []func(middleware.Event)
	errs        []error
}

// WithDefault sets the rule group of every method that New's map does not
// list and WithExempt does not exempt. Each such method counts in its own
// windows (its full method name is the scope) unless the group has a
// scope: statement, which makes them share. By default methods not listed
// are not limited.
func WithDefault(rulesText string) Option {
	return func(c *config) { c.defaults, c.hasDefaults = rulesText, true }
}

// WithExempt exempts methods from every limit, the default included: their
// calls are passed to the handler without any Redis call. Each entry is a
// full method name ("/grpc.health.v1.Health/Check") or a service name
// ending in a slash ("/grpc.health.v1.Health/"), which exempts every method
// of the service. Later calls add to the list. A method both listed in
// New's map and exempt makes New fail.
func WithExempt(methods ...string) Option {
	return func(c *config) { c.exempt = append(c.exempt, methods...) }
}

// WithPolicy sets the service-wide role policy applied with each group, as
// middleware.WithPolicy does. The default is the zero Policy.
func WithPolicy(p role.Policy) Option {
	return func(c *config) { c.policy = p }
}

// WithTrustedProxies makes the interceptors believe the proxy header
// metadata (see WithProxyHeader; "x-forwarded-for" by default) of calls
// whose peer address is in one of cidrs, exactly as
// middleware.WithTrustedProxies does for HTTP requests: read from the
// right, the first address that is not a trusted proxy is the client's.
// By default no proxy is trusted and the client is always the peer
// (peer.FromContext). An unparsable entry makes New fail.
func WithTrustedProxies(cidrs ...string) Option {
	return func(c *config) { c.trusted = append(c.trusted, cidrs...) }
}

// WithProxyHeader sets the metadata key that trusted proxies write the
// client address to, as middleware.WithProxyHeader does: XForwardedFor
// ("x-forwarded-for", the default) or Forwarded ("forwarded", RFC 7239).
func WithProxyHeader(h middleware.ProxyHeader) Option {
	return func(c *config) {
		if h != middleware.XForwardedFor && h != middleware.Forwarded {
			c.errs = append(c.errs, &middleware.ConfigError{Option: "WithProxyHeader", Value: strconv.Itoa(int(h)), Reason: "unknown proxy header"})
			return
		}
		c.proxyHeader = h
	}
}

// WithIPv6Prefix sets the prefix length by which IPv6 clients are grouped,
// as middleware.WithIPv6Prefix does; the default is
// middleware.DefaultIPv6Prefix (64).
func WithIPv6Prefix(bits int) Option {
	return func(c *config) {
		if bits < 1 || bits > 128 {
			c.errs = append(c.errs, &middleware.ConfigError{Option: "WithIPv6Prefix", Value: strconv.Itoa(bits), Reason: "prefix length must be 1 to 128"})
			return
		}
		c.v6bits = bits
	}
}

// WithKeyFunc registers fn as the subject of key(name) limiters. Every
// key(name) of every group must have a function when New is called, or New
// fails naming the method and the limiter's position. Registering a name
// again replaces the function.
func WithKeyFunc(name string, fn KeyFunc) Option {
	return func(c *config) {
		if fn == nil {
			c.errs = append(c.errs, &middleware.ConfigError{Option: "WithKeyFunc", Value: name, Reason: "nil key function"})
			return
		}
		if c.keys == nil {
			c.keys = make(map[string]KeyFunc)
		}
		c.keys[name] = fn
	}
}

// WithCostFunc registers fn as the cost function name: every limiter whose
// cost is name counts what fn returns for the call instead of 1. Every
// cost function a group names must be registered when New is called, or
// New fails naming the method and the limiter's position. Registering a
// name again replaces the function.
func WithCostFunc(name string, fn CostFunc) Option {
	return func(c *config) {
		if fn == nil {
			c.errs = append(c.errs, &middleware.ConfigError{Option: "WithCostFunc", Value: name, Reason: "nil cost function"})
			return
		}
		if c.costs == nil {
			c.costs = make(map[string]CostFunc)
		}
		c.costs[name] = fn
	}
}

// WithSettle makes the limiters whose cost is the cost function name (as
// in user[bytes]:2Gi/d) settle once the handler has run, as
// middleware.WithSettle does for HTTP requests: a call is admitted against
// its estimate, the cost function's result; afterwards it counts its
// actual cost instead, the one the handler reported with ReportCost or,
// with s.Written, the bytes of the response messages the handler sent:
// their serialized size (proto.Size, uncompressed, without gRPC's 5-byte
// message prefix) — a unary call's response when it succeeds (0 when it
// fails), each message a stream's SendMsg accepted. A call whose actual
// cost is unknown (none reported and not Written, a response that is not
// a protobuf message, a handler that panicked) keeps its estimate, erring
// on the side of denying; so does a call that a count: statement gives
// back. s.MaxDebt caps what a call may be charged beyond its estimate, as
// in middleware.Settlement. The Decider must be a middleware.Finisher (New
// fails with middleware.ErrNoFinish otherwise), and name a cost function
// name (New fails with a *middleware.ConfigError otherwise). Registering a
// name again replaces its Settlement; a name no group's limiter names
// settles nothing.
func WithSettle(name string, s middleware.Settlement) Option {
	return func(c *config) {
		if c.settle == nil {
			c.settle = make(map[string]middleware.Settlement)
		}
		c.settle[name] = s
	}
}

// ReportCost reports n, the actual cost of the call whose context is ctx
// for the cost function name, to the interceptors, which settle the call's
// limiters with that cost once the handler returns (see WithSettle): a
// handler calls it when it knows what the call consumed, such as the rows
// of a query. A later report replaces an earlier one. It returns false,
// and does nothing, when no settlement of name awaits the call (no limiter
// of its group settles name, the call was not admitted, or ctx is not the
// handler's, or derived from it) or n is negative. It is
// middleware.ReportCost: a handler shared by both transports may call
// either. It is safe for concurrent use.
func ReportCost(ctx context.Context, name string, n int64) bool {
	return middleware.ReportCost(ctx, name, n)
}

// WithLogger sets the logger that receives backend errors (Warn, at most
// one line per 10 s per Limiter, carrying the number of errors not logged
// since, whatever the number of calls), would-be denials in shadow mode
// (Info) and failing cost functions. The default is
// slog.Default() as it is when New runs. Errors are never sent to clients.
func WithLogger(l *slog.Logger) Option {
	return func(c *config) {
		if l != nil {
			c.logger = l
		}
	}
}

// serviceOf returns the service part of a full method name with its
// slashes, "/pkg.Service/" of "/pkg.Service/Method".
func serviceOf(fullMethod string) string {
	if i := strings.LastIndexByte(fullMethod, '/'); i > 0 {
		return fullMethod[:i+1]
	}
	return ""
}

// WithHook adds fn to the functions that receive a middleware.Event for
// every call of a limited method, exempt roles included, so that the
// metrics of contrib/promlimit and contrib/otellimit (their Hook methods)
// count gRPC calls as they count HTTP requests. The event is the HTTP
// middleware's, with these differences: Request is nil; Scope is the full
// method name unless a scope: statement names another; Status is the HTTP
// status of the same answer, 0 when the handler ran, 429 for
// ResourceExhausted, 503 for Unavailable (fail:closed), 500 for Internal
// and 400 for InvalidArgument (a cost function's ErrCostBadRequest).
// Hooks run synchronously on the call's goroutine, in the order they were
// added, before the handler or the refusal; they must be fast and safe
// for concurrent use.
func WithHook(fn func(middleware.Event)) Option {
	return func(c *config) {
		if fn != nil {
			c.hooks = append(c.hooks, fn)
		}
	}
}
