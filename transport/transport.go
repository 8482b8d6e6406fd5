// Package transport runs a request's life under a rule group for a
// transport other than net/http: contrib/grpclimit's gRPC interceptors,
// or a third party's (a message queue consumer, a Thrift server). The
// steps — resolve the caller, price, decide, respond, run, finish — are
// written once, in the module's internal lifecycle package, which the
// net/http middleware uses directly; this package is their public face.
// A transport only translates: its request into a Source (subjects and
// costs), the Verdict into its answer (headers or metadata, a status),
// and its handler's end into Finish's arguments.
//
// The name is the one the code gives a request's carrier (net/http, gRPC);
// it has nothing to do with Throttle.Transport, the http.RoundTripper of
// the root package, which paces outgoing requests.
//
// It is a package of its own, not part of middleware, because middleware
// is net/http's API and its users should not see this one; and it is
// small on purpose (13 exported names and methods), because every name
// here is a promise to code outside the module. What it exposes is what a
// transport needs: New for what its groups share, Transport.Compile for
// each group, and an Admission per request, with Admit and Finish.
// Everything else — plans, advertised policies, client addresses,
// settlement, the log throttle — stays internal. A transport reuses
// middleware's public API where it means the same thing:
// middleware.Decider, the options every transport shares, middleware.Event
// for hooks, middleware.ConfigError and middleware.ErrBadRequest.
//
// A typical transport:
//
//	t, err := transport.New(eng, "call", middleware.WithTrustedProxies("10.0.0.0/8"))
//	g, err := t.Compile(group, counts)
//	// per request, with a Source src over it:
//	var a transport.Admission
//	v := a.Admit(ctx, g, scope, src)
//	if v.Status != 0 {
//		// refuse, with v.Policy, v.Values, v.Retry and v.Quotas
//	}
//	// send v.Policy and v.Values, run the handler with v.Context when set,
//	// then, however it ended:
//	a.Finish(code, false, -1)
package transport

import (
	"context"
	"errors"

	"github.com/slidelimit/slidelimit/engine"
	"github.com/slidelimit/slidelimit/internal/lifecycle"
	"github.com/slidelimit/slidelimit/internal/ruletime"
	"github.com/slidelimit/slidelimit/middleware"
	"github.com/slidelimit/slidelimit/rules"
)

// Transport is a configured transport instance: what its groups share,
// their log throttle included. It is safe for concurrent use.
type Transport struct {
	t lifecycle.Transport
}

// New returns the Transport deciding with d; noun names what it limits in
// log lines, such as "call" ("" for "request"). opts are the middleware
// options every transport shares, meaning what they mean for net/http:
// WithTrustedProxies, WithProxyHeader, WithIPv6Prefix, WithPolicy,
// WithSettle, WithLogger and WithHook. New fails, listing every problem,
// with *middleware.ConfigError values, for a net/http option too.
func New(d middleware.Decider, noun string, opts ...middleware.Option) (*Transport, error) {
	t := &Transport{t: lifecycle.Transport{Noun: noun, Quotas: true}}
	if t.t.Noun == "" {
		t.t.Noun = "request"
	}
	if d != nil {
		t.t.Decider = d // a nil Decider must stay a nil interface
	}
	if errs := middleware.ConfigureTransport(&t.t, opts...); len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return t, nil
}

// Parse parses text as rules.Parse does, in a transport's dialect:
// rule, when not nil, is called for every rule of the group in text
// order, and a non-nil error rejects the group at the rule's offset;
// countItem, when not nil, reads each item of a count: statement in place
// of an HTTP status and returns its canonical spelling. Parse also checks
// the roles against the WithPolicy policy (a nil t checks none). Errors
// are *rules.Error values pointing into text as written.
func (t *Transport) Parse(text string, rule func(rules.Rule) error, countItem func(item string) (string, error)) (rules.Group, error) {
	g, err := rules.Dialect{Rule: rule, CountItem: countItem}.Parse(text)
	if err == nil && t != nil {
		err = lifecycle.Relocate(t.t.Policy.Check(g), text)
	}
	return g, err
}

// Compile prepares group g for t. counts reports whether a status of the
// transport's (such as a gRPC code) is listed in g's count: statement,
// whose items the transport's rules.Dialect read; it is not called for a
// group without one. Compile fails with a *rules.Error for a role the
// WithPolicy policy does not declare, with a *middleware.ConfigError when
// g needs a finish that t's Decider cannot do, and for a distinct:
// statement, whose values (a URL path) are net/http's.
func (t *Transport) Compile(g rules.Group, counts func(status int) bool) (*Group, error) {
	if g.Distinct != "" {
		return nil, errDistinct
	}
	if err := t.t.Policy.Check(g); err != nil {
		return nil, err
	}
	zone, err := ruletime.LoadZone(g.Calendar)
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
// calls each method at most once per request and rule, only when a
// rule needs it.
type Source interface {
	// Peer returns the address of the request's peer, as "host:port",
	// and the request's header (or metadata) the proxy header is read
	// from, which is read only for a trusted peer; nil for none.
	Peer() (addr string, header interface{ Values(name string) []string })
	// Value returns the value a rule of kind header(name) or key(name)
	// counts the request by; "" counts it by its client address.
	Value(l rules.Rule) string
	// Cost returns what the cost function name says the request costs, at
	// least 1; an error wrapping middleware.ErrBadRequest refuses the
	// request with 400, any other (or a cost below 1) with 500.
	Cost(name string) (int64, error)
}

// Admission is one request's life. Keep it in the value the transport
// makes per request (its zero value is ready), call Admit before the
// handler and Finish after it.
type Admission struct {
	a   lifecycle.Admission
	src source
}

// Verdict is what Admit decided, for the transport to translate: Status
// (0 when the handler runs, else the refusal as an HTTP status: 400 or 500
// for a request that could not be priced or decided, 429 for a full
// window, 503 when Redis failed and the group fails closed); Never (a 429
// no wait admits); Policy and Values (the RateLimit-Policy and RateLimit
// values to send); Retry (the wait a 429 or 503 advertises, in seconds);
// Quotas (for a 429, the windows the request does not fit in, the deciding
// one first); Err (a refusal's error, also in the hooks' event); Finish
// (Finish has work: call it however the handler ends); Context (when not
// nil, the context to run the handler with, carrying the cost report of
// middleware.ReportCost); Written (Finish wants the bytes written).
type Verdict = lifecycle.Verdict

// Quota is an advertised window: Window (with its limit) of Rule,
// named Name in the RateLimit fields, and what the request costs in it
// (at least 1).
type Quota = lifecycle.Quota

// Admit runs the steps before the handler — resolve the caller (the
// identity in ctx, role.FromContext), price, decide, respond — for a
// request of scope under g, whose subjects and costs src gives, and
// returns what the transport must answer. Hooks have seen the request's
// event when it returns.
func (a *Admission) Admit(ctx context.Context, g *Group, scope string, src Source) Verdict {
	a.src = source{s: src, scope: scope}
	v := a.a.Admit(ctx, g.r, &a.src)
	a.src.s = nil
	return v
}

// Finish finishes the request after its handler, which ended with status
// (as the group's count: statement lists it), or unknown (it panicked or
// took the connection: the request stays counted at its estimate), having
// written written bytes (negative when not known): gives the request back
// when count: does not list status, else settles its costs, and releases
// its slots, in one call that the response does not wait for. It does
// nothing unless the Verdict asked for it (Verdict.Finish).
func (a *Admission) Finish(status int, unknown bool, written int64) {
	a.a.Finish(lifecycle.Outcome{Status: status, Unknown: unknown, Written: written})
}

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

func (s *source) Value(_ *lifecycle.Plan, _ int, l rules.Rule) string { return s.s.Value(l) }

func (s *source) Cost(_ *lifecycle.Plan, _ int, name string) (int64, error) {
	return s.s.Cost(name)
}

// Limits keeps the written limits: limit functions ($name) are
// net/http's.
func (s *source) Limits(p *lifecycle.Plan, _ []engine.Check) (string, error) { return p.Field, nil }

// Distinct is never called: Compile refuses distinct: statements.
func (s *source) Distinct() string { return "" }

var errDistinct = errors.New("transport: distinct: is net/http's: a request of another transport has no URL path")
