package grpclimit

import (
	"context"
	"strings"

	"github.com/slidelimit/slidelimit/middleware"
)

// The functions WithKeyFunc and WithCostFunc register.
type (
	keyFunc  = func(ctx context.Context) string
	costFunc = func(ctx context.Context, fullMethod string, req any) (int64, error)
)

// Option configures New.
type Option func(*config)

type config struct {
	defaults    string
	hasDefaults bool
	exempt      []string
	keys        map[string]keyFunc
	costs       map[string]costFunc
	mw          []middleware.Option
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

// WithMiddlewareOptions gives New the middleware options every transport
// shares, which mean for calls what they mean for HTTP requests:
// middleware.WithTrustedProxies, WithProxyHeader (its metadata key in
// lower case), WithIPv6Prefix, WithPolicy, WithSettle, WithLogger and
// WithHook. The package documentation says what differs for gRPC. net/http's
// own options make New fail.
func WithMiddlewareOptions(opts ...middleware.Option) Option {
	return func(c *config) { c.mw = append(c.mw, opts...) }
}

// WithKeyFunc registers fn as the subject of key(name) rules, such as
// a tenant id the service's authentication put in the context; "" counts
// the call by client IP. Every key(name) of every group must have a
// function when New is called, or New fails naming the method and the
// rule's position. Registering a name again replaces fn.
func WithKeyFunc(name string, fn func(ctx context.Context) string) Option {
	return func(c *config) {
		if fn == nil {
			c.errs = append(c.errs, &middleware.ConfigError{Kind: "option", Option: "WithKeyFunc", Name: name, Reason: "nil key function"})
			return
		}
		if c.keys == nil {
			c.keys = make(map[string]keyFunc)
		}
		c.keys[name] = fn
	}
}

// WithCostFunc registers fn as the cost function name: every rule whose
// cost is name counts what fn returns for the call instead of 1. req is
// the request message of a unary call, nil for a stream (costed at its
// start). fn must return at least 1; an error wrapping
// middleware.ErrBadRequest is answered with codes.InvalidArgument, any
// other error or cost with codes.Internal, and is logged, never sent.
// Every cost function a group names must be registered when New is called.
// Registering a name again replaces fn.
func WithCostFunc(name string, fn func(ctx context.Context, fullMethod string, req any) (int64, error)) Option {
	return func(c *config) {
		if fn == nil {
			c.errs = append(c.errs, &middleware.ConfigError{Kind: "option", Option: "WithCostFunc", Name: name, Reason: "nil cost function"})
			return
		}
		if c.costs == nil {
			c.costs = make(map[string]costFunc)
		}
		c.costs[name] = fn
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
