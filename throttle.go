package slidelimit

import (
	"context"
	"errors"
	"net/http"
	"runtime"
	"time"

	"github.com/slidelimit/slidelimit/engine"
	"github.com/slidelimit/slidelimit/internal/overrides"
	"github.com/slidelimit/slidelimit/internal/throttle"
)

// A Throttle holds the calls a fleet of processes makes to another
// service (a paid API, a storage provider) under that service's limits:
// every process sharing the Redis and key prefix of its Limiter counts its
// calls in the same windows, and Wait blocks a call until every window has
// room for it. Create Throttles with Limiter.Throttle; a Throttle is safe
// for concurrent use. See docs/throttle.md.
type Throttle struct {
	t *throttle.Throttle
}

// Call is one call through a Throttle: the subjects and estimated costs its
// rules count.
type Call struct {
	// Keys gives the value of each key(NAME) rule, by NAME, such as
	// the API key the call is made with. Every key(NAME) rule of the
	// throttle's rules needs a non-empty value.
	Keys map[string]string
	// Costs gives the estimated cost of each rule with a named cost
	// ([tokens]), by name, such as the tokens a completion may use at
	// most. Every named cost of the rules needs a value of at least 1;
	// Permit.Finish settles it to what the call really cost.
	Costs map[string]int64
	// Class names the call's class for the throttle's share(CLASS):P%
	// statements. While calls of several classes wait, the calls of a
	// class with a share get P% of the admissions, less a turn or two,
	// fleet-wide; a share its class leaves unused is lent to the others.
	// Calls of a class without a share, and with Class "", share what
	// the shares leave, and about 1% of the admissions when the shares
	// add up to 100% (each share then gets about P×100/101 percent). A
	// throttle without shares ignores Class. See docs/throttle.md,
	// Classes and tenants.
	Class string
	// Tenant names whom the call is made for, such as a customer. Within
	// a class, waiting calls are served round-robin across tenants,
	// fleet-wide, and in arrival order within a tenant, so a tenant with
	// many waiters gets no more turns than one with few. "" is a tenant
	// like any other. In a throttle without shares, calls with Tenant ""
	// wait in arrival order while no call for the same subjects has a
	// tenant.
	Tenant string
}

// A Permit is a call a Throttle admitted. Finish it when the call has
// ended, so that its costs are settled and its in-flight slots released.
// A Permit that becomes unreachable without Finish is finished, keeping
// its estimates, and logged; a Permit kept unfinished releases its
// in-flight slots after the Limiter's maximum hold (WithMaxHold), and its
// Finish then still settles its costs.
type Permit struct {
	_       noCopy           // a copy would outlive the Permit its cleanup watches
	p       *throttle.Permit // never refers back, so the cleanup can run
	cleanup runtime.Cleanup  // finishes p once the Permit is unreachable
}

// noCopy makes go vet report copies of a Permit.
type noCopy struct{}

func (*noCopy) Lock()   {}
func (*noCopy) Unlock() {}

// Throttle returns the throttle name enforcing rulesText over the calls
// out of every process sharing the Limiter's Redis and key prefix:
//
//	t, err := lim.Throttle("openai", "key(apikey):500/min; key(apikey)[tokens]:90000/min")
//
// Declare the upstream's own limits: the windows allow for a call's way
// to the upstream, up to the transit bound (WithTransitBound).
//
// name is the scope of its windows, for SetRules too, which refuses
// key(NAME) rules and named costs that rulesText does not have.
// Statements that have no meaning for calls out (roles, ip, user, header
// and param rules, count:, distinct:, mode:shadow) are a *ConfigError;
// docs/throttle.md lists what a throttle accepts.
func (l *Limiter) Throttle(name, rulesText string) (*Throttle, error) {
	if !validScopeName(name) {
		return nil, configError(name, "", "", errors.New("the throttle name must be a valid scope: name"))
	}
	g, err := overrides.Group(name, rulesText)
	if err != nil {
		return nil, configError(name, "", rulesText, err)
	}
	mp := middlewareParts(l.opts)
	t, err := throttle.New(throttle.Config{Name: name, Engine: l.engine, Client: l.client, Limits: mp.Limits,
		Hooks: mp.Hooks, MaxHold: l.maxHold, Transit: l.transit, Overrides: l.ov,
		ConfigError: func(err error) error { return configError(name, "", "", err) }}, g)
	if err != nil {
		return nil, configError(name, "", rulesText, err)
	}
	// Known to Peek, Reset and the operator page like a route's scope.
	l.reg.Add(name, g, nil)
	th := &Throttle{t: t}
	l.mu.Lock()
	l.throttles = append(l.throttles, th)
	l.mu.Unlock()
	return th, nil
}

// Name returns the throttle's name, the scope of its windows.
func (t *Throttle) Name() string { return t.t.Name() }

// Wait blocks until every window of the throttle has room for c, counts
// it in all of them, and returns its Permit, which the caller must Finish.
// Callers wait in arrival order across the fleet (docs/throttle.md,
// Fairness), or by class and tenant (Call.Class, Call.Tenant). When ctx ends first Wait returns ctx.Err() having counted
// nothing; a call that can never fit fails at once, and one missing a
// value, with a *ConfigError of kind "never-fits" or "call". While Redis
// fails, the group's fail mode decides: closed, unless a fail: statement
// says otherwise.
func (t *Throttle) Wait(ctx context.Context, c Call) (*Permit, error) {
	p, err := t.t.Wait(ctx, throttle.Call(c))
	if err != nil {
		return nil, err
	}
	return newPermit(p), nil
}

// Allow admits c at once if every window has room for it, without
// waiting and without passing callers that wait for the same subjects.
// It returns a nil Permit and false when c must wait; errors are those of
// Wait.
func (t *Throttle) Allow(ctx context.Context, c Call) (*Permit, bool, error) {
	p, ok, err := t.t.Allow(ctx, throttle.Call(c))
	if !ok {
		return nil, false, err
	}
	return newPermit(p), true, err
}

// WaitAny blocks until one of calls fits, such as the same call under
// several API keys, counts it, and returns its Permit and index. The
// other calls count nothing once WaitAny returns. A call whose key an
// upstream blocked (a learned block, from Transport or Permit.Learn, in
// any process) is not asked until the block ends; the others are
// admitted meanwhile. A call that
// lacks a value fails with its index before any call is asked; no calls
// is a *ConfigError of kind "call". When ctx ends first WaitAny returns
// ctx.Err() and -1, having counted nothing. See docs/throttle.md.
func (t *Throttle) WaitAny(ctx context.Context, calls ...Call) (*Permit, int, error) {
	cs := make([]throttle.Call, len(calls))
	for i, c := range calls {
		cs[i] = throttle.Call(c)
	}
	p, i, err := t.t.WaitAny(ctx, cs...)
	if err != nil {
		return nil, i, err
	}
	return newPermit(p), i, nil
}

// newPermit returns the Permit holding p, finished by a cleanup once it
// becomes unreachable unfinished.
func newPermit(p *throttle.Permit) *Permit {
	h := &Permit{p: p}
	h.cleanup = runtime.AddCleanup(h, (*throttle.Permit).Dropped, p)
	return h
}

// Finish ends the call p admitted: the cost of each rule named in
// actual (by cost name, as in Call.Costs) is settled to its value, the
// others keep their estimate, and in-flight slots are released. A value
// is capped at the smallest limit of the rule's windows (no call can
// use more than a whole window allows); a negative value is ignored, the
// estimate kept. It does not block: the work rides the engine's next
// script call, or leaves within 1 ms (see Engine.FinishAsync). Finishing
// a Permit again, or a nil Permit, does nothing.
func (p *Permit) Finish(actual map[string]int64) {
	if p == nil || p.p == nil {
		return
	}
	p.cleanup.Stop()
	p.p.Finish(actual)
}

// Learn teaches the throttle the upstream's answer to the call p
// admitted, as Transport does with every response: a 429 or 503 counts
// in Upstream429s (the throttle's and the call's class's), and its wait
// (retry-after-ms, or Retry-After in seconds or as an HTTP date), at
// most DefaultMaxUpstreamBlock, blocks the call's subjects in every
// process, a learned block: Wait, Allow and WaitAny hold calls for them
// until it ends or Limiter.Reset of one of them lifts it, and WaitAny
// picks another of its calls at once. Any other status, a value that is
// no positive number or future date, and a nil resp teach nothing. Call
// it before Finish: Learn does not finish p, and a Learn of a finished
// Permit, or of one that learned already, does nothing. The refused call
// stays counted as Transport's does: Finish settles it as any other
// (its estimates, or the actual costs given). Learn of a nil Permit
// does nothing. It is safe for concurrent use with Finish.
func (p *Permit) Learn(resp *http.Response) {
	if p == nil || p.p == nil {
		return
	}
	p.p.Learn(resp, DefaultMaxUpstreamBlock)
}

// Decision returns the engine's decision that admitted the call.
func (p *Permit) Decision() engine.Decision {
	if p == nil || p.p == nil {
		return engine.Decision{}
	}
	return p.p.Decision()
}

// ThrottleStats is what a throttle did, for the operator page and tests.
type ThrottleStats struct {
	// Name is the throttle's name.
	Name string `json:"name"`
	// Rules is the rule group in force (the code's or an override's).
	Rules string `json:"rules"`
	// Waiting is the number of callers in Wait now, in this process.
	Waiting int64 `json:"waiting"`
	// WaitP50 and WaitP99 are percentiles of the time Wait took to admit,
	// over the last 1,024 admissions in this process.
	WaitP50 time.Duration `json:"wait_p50"`
	WaitP99 time.Duration `json:"wait_p99"`
	// Admitted counts the calls admitted in this process.
	Admitted int64 `json:"admitted"`
	// Active is the number of permits admitted and not yet finished, in
	// this process. A permit held past the maximum hold leaves it then.
	Active int64 `json:"active"`
	// RedisCalls counts the Redis calls made to admit them: decisions and
	// the fleet order's script (not the finishes).
	RedisCalls int64 `json:"redis_calls"`
	// Upstream429s counts the 429 and 503 answers Transport passed back
	// and Permit.Learn was given.
	Upstream429s int64 `json:"upstream_429s"`
	// Classes holds the same, per class, once the rules have share
	// statements: one entry for each class they name and one of class
	// "other" for the calls of any other class, each from its first call
	// in this process, in that order. Classes a rule group named before a
	// SetRules stay; at most 32 classes are kept, later ones count as
	// "other".
	Classes []ThrottleClassStats `json:"classes,omitempty"`
}

// ThrottleClassStats is what a throttle did for the calls of one class
// (Call.Class) in this process. Its fields mean what ThrottleStats's of
// the same names do.
type ThrottleClassStats struct {
	Class        string        `json:"class"`
	Waiting      int64         `json:"waiting"`
	WaitP50      time.Duration `json:"wait_p50"`
	WaitP99      time.Duration `json:"wait_p99"`
	Admitted     int64         `json:"admitted"`
	Upstream429s int64         `json:"upstream_429s"`
}

// Stats returns what t did in this process.
func (t *Throttle) Stats() ThrottleStats {
	s := t.t.Stats()
	out := ThrottleStats{Name: s.Name, Rules: s.Rules, Waiting: s.Waiting, WaitP50: s.WaitP50, WaitP99: s.WaitP99,
		Admitted: s.Admitted, Active: s.Active, RedisCalls: s.RedisCalls, Upstream429s: s.Upstream429s}
	for _, c := range s.Classes {
		out.Classes = append(out.Classes, ThrottleClassStats(c))
	}
	return out
}

// TransportOption configures Throttle.Transport.
type TransportOption func(*transportConfig)

type transportConfig struct {
	throttle.TransportConfig
	call  func(*http.Request) (Call, error)
	calls func(*http.Request) ([]Call, error)
}

// WithCall makes the Transport build each request's Call with fn: the
// values of its key(NAME) rules (an API key from a header) and the
// estimates of its costs (max_tokens from the body). An error fails the
// round trip without sending it. Without WithCall every request is Call{}.
func WithCall(fn func(*http.Request) (Call, error)) TransportOption {
	return func(c *transportConfig) { c.call = fn }
}

// WithCalls makes the Transport admit each request as WaitAny does,
// over the calls fn returns, such as the same call under each of several
// API keys, and send the request use returns for the index admitted,
// such as a clone of req (req.Clone, sharing its body) with that key's
// header; a nil use, or a nil request from it, sends req itself. An error
// of fn fails the round trip without sending it, as one of WaitAny does.
// The response teaches the chosen call's block (Permit.Learn), so a key
// the upstream blocked is skipped by every process at once. WithCall and
// WithCalls together make every round trip fail with a *ConfigError of
// kind "call".
func WithCalls(fn func(*http.Request) ([]Call, error), use func(req *http.Request, i int) *http.Request) TransportOption {
	return func(c *transportConfig) { c.calls, c.Use = fn, use }
}

// WithActual makes the Transport settle each admitted request's costs to
// what fn reads from the response, such as a usage header, once the
// response body is closed: headers and trailers are complete then. Cost
// names fn leaves out keep their estimate; so do all of them without
// WithActual, WithActualBody or WithActualBytes.
func WithActual(fn func(*http.Response) map[string]int64) TransportOption {
	return func(c *transportConfig) { c.Actual = fn }
}

// WithActualBody makes the Transport settle each admitted request's costs
// to what fn reads from the response and the body the caller read, such
// as the usage of a JSON completion or of a stream's last event. fn runs
// once, when the body is first closed; body holds what the caller read:
// all of it up to 1 MiB, else its last 1 MiB. A body closed before its
// end, or whose read failed, is passed as far as it was read. Cost names
// fn leaves out keep their estimate, or WithActual's value: with both,
// both run and fn's value wins for the names it sets. If fn panics, the
// panic reaches the caller of Close and the call keeps its estimates.
func WithActualBody(fn func(resp *http.Response, body []byte) map[string]int64) TransportOption {
	return func(c *transportConfig) { c.Body = fn }
}

// WithActualBytes makes the Transport settle cost name of each admitted
// request to the number of body bytes the caller read before closing the
// body, for downloads whose size is unknown until they end. The call's
// Costs[name] is counted until then; a settlement above it is a debt,
// capped as every throttle settlement is. Its value wins over WithActual's
// and WithActualBody's for name. Given more than once, each name is
// settled; a name no rule has settles nothing.
func WithActualBytes(name string) TransportOption {
	return func(c *transportConfig) { c.Bytes = append(c.Bytes, name) }
}

// DefaultMaxUpstreamBlock is the longest block a Transport learns from an
// upstream's answer, unless WithMaxUpstreamBlock says otherwise.
const DefaultMaxUpstreamBlock = time.Hour

// WithMaxUpstreamBlock caps the block a Transport learns from a 429 or 503
// (retry-after-ms, or Retry-After in seconds or as an HTTP date) at d: a
// longer wait asked for holds the call's subjects for d. d <= 0 means
// DefaultMaxUpstreamBlock, one hour. The other processes are told the
// capped block. A process holds a block it hears of from another at most
// the largest cap of its own Transports of the throttle, one hour when it
// has none.
func WithMaxUpstreamBlock(d time.Duration) TransportOption {
	return func(c *transportConfig) { c.MaxBlock = d }
}

// Transport returns an http.RoundTripper that sends each request through
// base (http.DefaultTransport when nil) once t admits it, as Wait does, and
// finishes the Permit when the response body is closed (WithCalls: as
// WaitAny does). A 429 or 503 with Retry-After blocks the request's subjects fleet-wide for that long, at
// most an hour (WithMaxUpstreamBlock); Limiter.Reset of one of the
// subjects lifts the block. A header value that is no positive number or
// future date is ignored.
func (t *Throttle) Transport(base http.RoundTripper, opts ...TransportOption) http.RoundTripper {
	var c transportConfig
	for _, o := range opts {
		if o != nil {
			o(&c)
		}
	}
	if c.MaxBlock <= 0 {
		c.MaxBlock = DefaultMaxUpstreamBlock
	}
	if fn := c.call; fn != nil {
		c.Call = func(r *http.Request) (throttle.Call, error) {
			call, err := fn(r)
			return throttle.Call(call), err
		}
	}
	if fn := c.calls; fn != nil {
		c.Calls = func(r *http.Request) ([]throttle.Call, error) {
			calls, err := fn(r)
			cs := make([]throttle.Call, len(calls))
			for i, call := range calls {
				cs[i] = throttle.Call(call)
			}
			return cs, err
		}
	}
	return t.t.Transport(base, c.TransportConfig)
}

// throttlesNamed returns l's throttles named name.
func (l *Limiter) throttlesNamed(name string) []*Throttle {
	l.mu.RLock()
	defer l.mu.RUnlock()
	var out []*Throttle
	for _, t := range l.throttles {
		if t.t.Name() == name {
			out = append(out, t)
		}
	}
	return out
}
