// Package lifecycle is a request's life under a rule group, written once
// for every transport: resolve the caller → price → decide → respond → run
// → finish. The net/http middleware and contrib/grpclimit are adapters that
// translate their requests into subjects, costs and limits, their
// handlers' outcomes into an engine.Outcome, and decisions into headers,
// trailers and status codes; what does not depend on the transport lives
// here: the advertised policies and their field values (Plan), subjects
// and client addresses (ClientIP), a request's engine checks (Checks),
// what a group applies (Block, HoldsSlots), settlement (Plan.SettleWith,
// the handler's Report, Plan.Actual) and the finish step (Finish).
package lifecycle

import (
	"context"
	"errors"
	"strconv"
	"time"

	"github.com/slidelimit/slidelimit/engine"
	"github.com/slidelimit/slidelimit/role"
	"github.com/slidelimit/slidelimit/rules"
)

// Block returns the block a denial by one of g's limiters starts: g.Block,
// or zero in shadow mode. A shadow group never refuses a request, and a
// block it started would refuse the subject at once, for the rest of the
// block, when the group is switched to enforce.
func Block(g *rules.Group) time.Duration {
	if g.Mode == rules.Shadow {
		return 0
	}
	return g.Block
}

// HoldsSlots reports whether some limiter of g, default or override, has
// an in-flight window: admitted requests then hold slots that the
// transport must release (Finish) when they end.
func HoldsSlots(g *rules.Group) bool {
	for _, ls := range g.LimiterLists() {
		for _, l := range ls {
			for _, w := range l.Windows {
				if w.Concurrent {
					return true
				}
			}
		}
	}
	return false
}

// SubjectSource gives Checks what the limiters of one request count by. A
// transport implements it over its own request.
type SubjectSource interface {
	// ClientIP returns the subject of the request's client address, as
	// ClientIP.Subject does. It is called for ip limiters and for each
	// limiter that counts the request by its address instead; a source
	// should find the address once.
	ClientIP() string
	// Value returns the value that limiter i, l, of kind header, param or
	// key counts by; "" counts the request by its client address.
	Value(i int, l rules.Limiter) string
}

// Checks returns the engine checks of a request by id, resolved as res
// (role.Policy.Resolve) to p's limiters under group g: one check per
// limiter, in order, with its subject, its constant cost (Cost 0 for a
// cost of 1; a cost function's is the transport's to set) and g's block.
func (p *Plan) Checks(g *rules.Group, id role.Identity, res role.Resolution, src SubjectSource) []engine.Check {
	cs := make([]engine.Check, len(p.Limiters))
	block := Block(g)
	for i, lim := range p.Limiters {
		cs[i].Limiter, cs[i].Block = lim, block
		var v string
		if lim.Kind.Named() {
			v = src.Value(i, lim)
		}
		if cs[i].Subject = SubjectFor(lim.Kind, id.User, res.ByIP, v); cs[i].Subject == "" {
			cs[i].Subject = src.ClientIP()
		}
		if IsDecimal(lim.Cost) {
			if n, err := strconv.ParseInt(lim.Cost, 10, 64); err == nil && n > 1 {
				cs[i].Cost = n
			}
		}
	}
	return cs
}

// Finisher ends admitted requests; *engine.Engine implements it.
type Finisher interface {
	Finish(ctx context.Context, d engine.Decision, o engine.Outcome) error
}

// AsyncFinisher ends admitted requests without making the caller wait for
// Redis (engine.Engine.FinishAsync); *engine.Engine implements it. Its
// errors go to the engine's log and counter: the response has gone.
type AsyncFinisher interface {
	FinishAsync(d engine.Decision, o engine.Outcome)
}

// The steps a Decider that is not a Finisher may offer instead; *engine.Engine
// implements them too (as shorthands of Finish).
type (
	giver interface {
		GiveBack(ctx context.Context, req engine.Request, d engine.Decision) error
	}
	releaser interface {
		Release(ctx context.Context, req engine.Request, d engine.Decision) error
	}
	settler interface {
		Settle(ctx context.Context, req engine.Request, d engine.Decision, actual []int64) error
	}
)

// Finish is the step after the handler, for every transport: it ends the
// request that req and d admitted with outcome o (give back, settle,
// release its slots) in one call of an AsyncFinisher, which queues the
// work and returns at once, so that no response waits for Redis after its
// handler (the engine sends it with its next script call, within
// engine.AsyncBound); of a Finisher; or with the GiveBack, Release and
// Settle that decider offers otherwise, which the response waits for. It
// is called however the handler ended (normally, by panic, after the
// client hung up), with a context that outlives the request's. It returns
// the first error of the waiting forms; the engine has queued what
// failed.
func Finish(ctx context.Context, decider any, req *engine.Request, d *engine.Decision, o engine.Outcome) error {
	if !d.Allowed {
		return nil
	}
	if f, ok := decider.(AsyncFinisher); ok {
		f.FinishAsync(*d, o)
		return nil
	}
	if f, ok := decider.(Finisher); ok {
		return f.Finish(ctx, *d, o)
	}
	var err error
	given := false
	if g, ok := decider.(giver); ok && o.GiveBack {
		err = g.GiveBack(ctx, *req, *d)
		given = err == nil // a request given back holds no slot any more
	}
	if r, ok := decider.(releaser); ok && !given {
		if rerr := r.Release(ctx, *req, *d); err == nil {
			err = rerr
		}
	}
	if s, ok := decider.(settler); ok && o.Actual != nil && !o.GiveBack {
		if serr := s.Settle(ctx, *req, *d, o.Actual); err == nil {
			err = serr
		}
	}
	return err
}

// Decider makes rate-limit decisions; *engine.Engine implements it.
type Decider interface {
	Allow(ctx context.Context, req engine.Request) (engine.Decision, error)
}

// Decided is what the decide step learnt: the decision and what every
// transport derives from it.
type Decided struct {
	Decision engine.Decision
	Err      error         // returned with the decision
	Latency  time.Duration // of the Allow call
	// Retry is the wait a refusal advertises, in whole seconds
	// (RetryAfterSeconds); 0 for an admission and in shadow mode.
	Retry int64
	// Items are the windows the RateLimit values name, and Primary the
	// deciding one (see Plan.Constrained), indexes in Decision.Windows.
	Items   []int
	Primary int
	// Policy is the deciding window's policy; nil when it has none.
	Policy *Policy
	// Invalid reports that the engine could not evaluate the request
	// (engine.ErrInvalid): a server error, not a client over its limit.
	Invalid bool
}

// Decide is the decide step, for every transport: it asks d to admit req,
// a request of p's checks, and works out the deciding window and the
// advertised wait (none in shadow mode, which never refuses).
func (p *Plan) Decide(ctx context.Context, d Decider, req engine.Request, shadow bool) Decided {
	start := time.Now()
	dec, err := d.Allow(ctx, req)
	r := Decided{Decision: dec, Err: err, Latency: time.Since(start)}
	r.Items, r.Primary = p.Constrained(&r.Decision)
	if r.Primary >= 0 {
		ws := &dec.Windows[r.Primary]
		r.Policy = p.Lookup(ws.Check, ws.Window)
	}
	if !dec.Allowed && !shadow {
		r.Retry = RetryAfterSeconds(dec.RetryAfter)
	}
	r.Invalid = err != nil && errors.Is(err, engine.ErrInvalid)
	return r
}

// Values returns the RateLimit field values of r's items, the effective
// window capped at maxT seconds when positive.
func (p *Plan) Values(r *Decided, maxT int64) []string {
	var values []string
	for _, i := range r.Items {
		ws := r.Decision.Windows[i]
		if pol := p.Lookup(ws.Check, ws.Window); pol != nil {
			values = append(values, RateLimitField(pol.Name, ws, pol.Per, maxT))
		}
	}
	return values
}
