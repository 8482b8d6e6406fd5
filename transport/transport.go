// Package transport runs a request's life under a rule group for a
// transport other than net/http: contrib/grpclimit's gRPC interceptors,
// or a third party's (a message queue consumer, a Thrift server). The
// steps — resolve the caller, price, decide, respond, run, finish — are
// written once, in the module's internal lifecycle package, which the
// net/http middleware uses directly; this package is their public face.
// A transport only translates: its request into a Source (subjects and
// costs), the Verdict into its answer (headers or metadata, a status),
// and its handler's end into an Outcome.
//
// The name is the one the code gives a request's carrier (net/http, gRPC);
// it has nothing to do with Throttle.Transport, the http.RoundTripper of
// the root package, which paces outgoing requests.
//
// It is a package of its own, not part of middleware, because middleware
// is net/http's API and its users should not see this one; and it is
// small on purpose (15 exported names and methods), because every name
// here is a promise to code outside this module, which contrib is: it has
// its own go.mod and cannot reach internal packages. What it exposes is
// what a transport needs: Config and New for what its groups share,
// Transport.Compile for each group, and an Admission per request, with
// Admit and End. Everything else — plans, advertised policies, client
// addresses, settlement, the log throttle — stays internal. A transport
// reuses middleware's public types where they mean the same thing:
// middleware.Decider, middleware.Event for hooks, middleware.Settlement,
// middleware.ProxyHeader, middleware.CostError and the cost errors.
//
// A typical transport:
//
//	t, err := transport.New(transport.Config{Decider: eng, Noun: "call"})
//	g, err := t.Compile(group, counts)
//	// per request, with a Source src over it:
//	var a transport.Admission
//	v := a.Admit(ctx, g, scope, src)
//	if v.Status != 0 {
//		// refuse, with v.Policy, v.Values, v.Retry and v.Quotas
//	}
//	// send v.Policy and v.Values, run the handler with v.Context when set,
//	// then, however it ended:
//	a.End(transport.Outcome{Status: code})
package transport

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"strconv"

	"github.com/slidelimit/slidelimit/engine"
	"github.com/slidelimit/slidelimit/internal/lifecycle"
	"github.com/slidelimit/slidelimit/internal/rulesx"
	"github.com/slidelimit/slidelimit/middleware"
	"github.com/slidelimit/slidelimit/role"
	"github.com/slidelimit/slidelimit/rules"
)

// Config is what every group of one transport instance shares. The
// options mean what middleware's options of the same names do.
type Config struct {
	// Decider decides; *engine.Engine is one. A group with a count:
	// statement, an in-flight window or settled costs needs a Decider
	// that is also a middleware.Finisher (Compile fails with
	// middleware.ErrNoFinish otherwise).
	Decider middleware.Decider
	// Policy is the role policy applied with each group.
	Policy role.Policy
	// TrustedProxies, ProxyHeader and IPv6Prefix (0 for
	// middleware.DefaultIPv6Prefix) say which address is a request's
	// client's, as middleware.WithTrustedProxies, WithProxyHeader and
	// WithIPv6Prefix do.
	TrustedProxies []string
	ProxyHeader    middleware.ProxyHeader
	IPv6Prefix     int
	// Settle maps cost function names to how their limiters settle, as
	// middleware.WithSettle does.
	Settle map[string]middleware.Settlement
	// Logger receives backend errors (at most one line per 10 s per
	// Transport), configuration errors and would-be denials in shadow
	// mode; nil for slog.Default().
	Logger *slog.Logger
	// Hooks receive an event per request.
	Hooks []func(middleware.Event)
	// Noun names what the transport limits in log lines, such as "call";
	// "" for "request".
	Noun string
}

// Transport is a configured transport instance: what its groups share,
// their log throttle included. It is safe for concurrent use.
type Transport struct {
	t lifecycle.Transport
}

// New returns the Transport of c. It fails, listing every problem, with a
// *middleware.ConfigError for a trusted proxy that is not an address or
// prefix, an IPv6 prefix length outside 1..128, or a Settle entry whose
// name is not a cost function name or whose MaxDebt is below NoDebt.
func New(c Config) (*Transport, error) {
	t := &Transport{t: lifecycle.Transport{Policy: c.Policy, Logger: c.Logger, Hooks: c.Hooks, Noun: c.Noun, Quotas: true,
		IP: lifecycle.ClientIP{Header: c.ProxyHeader, V6Bits: c.IPv6Prefix}}}
	if c.Decider != nil {
		t.t.Decider = c.Decider // a nil Decider must stay a nil interface
	}
	if t.t.Logger == nil {
		t.t.Logger = slog.Default()
	}
	var errs []error
	if t.t.IP.V6Bits == 0 {
		t.t.IP.V6Bits = middleware.DefaultIPv6Prefix
	}
	if b := t.t.IP.V6Bits; b < 1 || b > 128 {
		errs = append(errs, &middleware.ConfigError{Option: "WithIPv6Prefix", Value: strconv.Itoa(b), Reason: "prefix length must be 1 to 128"})
	}
	for _, s := range c.TrustedProxies {
		p, err := lifecycle.ParseTrusted(s)
		if err != nil {
			errs = append(errs, &middleware.ConfigError{Option: "WithTrustedProxies", Value: s, Reason: "not an IP address or CIDR prefix"})
			continue
		}
		t.t.IP.Trusted = append(t.t.IP.Trusted, p)
	}
	names := make([]string, 0, len(c.Settle))
	for name := range c.Settle {
		names = append(names, name)
	}
	slices.Sort(names) // errors in a stable order
	for _, name := range names {
		if reason := lifecycle.PutSettle(&t.t.Settle, name, lifecycle.Settle(c.Settle[name])); reason != "" {
			errs = append(errs, &middleware.ConfigError{Option: "WithSettle", Value: name, Reason: reason})
		}
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return t, nil
}

// Compile prepares group g for t. counts reports whether a status of the
// transport's (such as a gRPC code) is listed in g's count: statement,
// whose items the transport's dialect read; it is not called for a
// group without one. Compile fails with middleware.ErrNoFinish when g
// needs a finish that t's Decider cannot do, and for a distinct:
// statement, whose values (a URL path) are net/http's.
func (t *Transport) Compile(g rules.Group, counts func(status int) bool) (*Group, error) {
	if g.Distinct != "" {
		return nil, errDistinct
	}
	zone, err := rulesx.Zone(&g)
	if err != nil {
		return nil, err
	}
	r, errs := lifecycle.NewRules(&t.t, g, zone, counts, nil)
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return &Group{r: r}, nil
}

// Group is a rule group compiled for a Transport. It is immutable and
// safe for concurrent use.
type Group struct {
	r *lifecycle.Rules
}

// Source is what a transport translates its request into. The Admission
// calls each method at most once per request and limiter, only when a
// limiter needs it.
type Source interface {
	// Peer returns the address of the request's peer, as "host:port",
	// and the request's header (or metadata) the proxy header is read
	// from, which is read only for a trusted peer; nil for none.
	Peer() (addr string, header interface{ Values(name string) []string })
	// Value returns the value a limiter of kind header(name) or key(name)
	// counts the request by; "" counts it by its client address.
	Value(l rules.Limiter) string
	// Cost returns what the cost function name says the request costs, at
	// least 1; an error wrapping middleware.ErrCostBadRequest refuses the
	// request with 400, any other (or a cost below 1) with 500, reported
	// as a *middleware.CostError.
	Cost(name string) (int64, error)
}

// Admission is one request's life. Keep it in the value the transport
// makes per request (its zero value is ready), call Admit before the
// handler and End after it.
type Admission struct {
	a   lifecycle.Admission
	src source
}

// Verdict is what Admit decided, for the transport to translate.
type Verdict struct {
	// Status is 0 when the handler runs, else the refusal as an HTTP
	// status: 400 or 500 for a request that could not be priced or
	// decided, 429 for a full window, 503 when Redis failed and the group
	// fails closed.
	Status int
	// Never reports a 429 for a request costing more than a whole quota:
	// no wait admits it.
	Never bool
	// Policy is the RateLimit-Policy value to send, "" for none, and
	// Values the RateLimit values, one per advertised window.
	Policy string
	Values []string
	// Retry is the wait a 429 or 503 advertises, in whole seconds.
	Retry int64
	// Quotas are, for a 429, the windows the request does not fit in, the
	// deciding one first.
	Quotas []Quota
	// Err is the error of a refusal (a *middleware.CostError, an engine
	// error), also in the hooks' event.
	Err error
	// Finish reports that End has work to do: the transport must call it
	// however the handler ends.
	Finish bool
	// Context, when not nil, is the context the handler must run with:
	// it carries the cost report middleware.ReportCost fills.
	Context context.Context
	// Written asks for the bytes of response the handler wrote
	// (Outcome.Written), which a settlement needs.
	Written bool
}

// Quota is an advertised window: Window (with its limit) of Limiter,
// named Name in the RateLimit fields, and what the request costs in it
// (at least 1).
type Quota = lifecycle.Quota

// Outcome is what the transport saw of the handler's run.
type Outcome struct {
	// Status is the handler's status as the group's count: statement
	// lists it (the counts function of Compile).
	Status int
	// Unknown reports a handler that panicked or took the connection: the
	// request stays counted at its estimate.
	Unknown bool
	// Written is the bytes of response the handler wrote, for a
	// settlement to the bytes written; negative when unknown.
	Written int64
}

// Admit runs the steps before the handler — resolve the caller (the
// identity in ctx, role.FromContext), price, decide, respond — for a
// request of scope under g, whose subjects and costs src gives, and
// returns what the transport must answer. Hooks have seen the request's
// event when it returns.
func (a *Admission) Admit(ctx context.Context, g *Group, scope string, src Source) Verdict {
	a.src = source{s: src, scope: scope}
	v := a.a.Admit(ctx, g.r, &a.src)
	a.src.s = nil
	return Verdict{Status: v.Status, Never: v.Never, Policy: v.Policy, Values: v.Values, Retry: v.Retry,
		Quotas: v.Quotas, Err: v.Err, Finish: v.Finish, Context: v.Context, Written: v.Written}
}

// End finishes the request after its handler with outcome o: gives it
// back when the group's count: statement does not list o.Status, else
// settles its costs, and releases its slots, in one call of the
// Decider's FinishAsync that the response does not wait for. It does
// nothing unless the Verdict asked for it (Verdict.Finish).
func (a *Admission) End(o Outcome) { a.a.End(lifecycle.Outcome(o)) }

// source is a Source as the lifecycle asks for it.
type source struct {
	s     Source
	scope string
}

func (s *source) FindScope() string { return s.scope }

func (s *source) Peer() (string, lifecycle.HeaderValues) {
	addr, h := s.s.Peer()
	if h == nil {
		return addr, nil // a nil interface, not a nil value in one
	}
	return addr, h
}

func (s *source) Value(_ *lifecycle.Plan, _ int, l rules.Limiter) string { return s.s.Value(l) }

func (s *source) Cost(_ *lifecycle.Plan, _ int, name string) (int64, error) {
	return s.s.Cost(name)
}

// Limits keeps the written limits: limit functions ($name) are
// net/http's.
func (s *source) Limits(p *lifecycle.Plan, _ []engine.Check) (string, error) { return p.Field, nil }

// Distinct is never called: Compile refuses distinct: statements.
func (s *source) Distinct() string { return "" }

var errDistinct = errors.New("transport: distinct: is net/http's: a request of another transport has no URL path")
