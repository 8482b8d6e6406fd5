package engine

import (
	"context"

	"github.com/slidelimit/slidelimit/engine/internal/admission"
	"github.com/slidelimit/slidelimit/engine/internal/codec"
	"github.com/slidelimit/slidelimit/engine/internal/plan"
)

// Outcome is how an admitted request ended, for Finish. The zero Outcome
// only releases the request's slots: it stays counted at its cost.
type Outcome struct {
	// GiveBack takes the request out of every window it was counted in, as
	// if it had never been made (a count: statement's uncounted outcome).
	// It removes the request's own entry only, never another's.
	GiveBack bool
	// Actual, when non-nil, settles the request: Actual[i] is the actual
	// cost of check i of its Request, or -1 to keep what the check was
	// charged. It must have one element per check. Only rules with a
	// cost settle: a check without one must have -1 or its cost, and so
	// must checks sharing a key with different actual costs. A request is
	// settled at most once; settle to 0 to give it back in full. A request
	// given back is not settled. To cap a debt, pass min(actual,
	// estimate+cap).
	Actual []int64
}

// Finish ends the request that d admitted, in one round trip shared with
// concurrent calls. It gives the request back when o.GiveBack, settles its
// costs when o.Actual is non-nil, and always releases its slots. It is
// safe for concurrent use.
//
// Finish is idempotent: what an earlier Finish of d, or of a copy of d,
// did is not done again. It does nothing and returns nil for a Decision
// that counted nothing: a denial, a peek, a fail-open or fail-closed
// decision, or an Allow without windows. A decision of the local fallback
// (Source "local") is finished in process. Finish returns:
//   - an error matching ErrInvalid, changing nothing, when o.Actual has the
//     wrong length or settles a rule without a cost to another cost;
//   - ErrClosed after Close;
//   - an error matching ErrBackend when Redis fails or is considered down.
//     The work is then queued and retried before later script calls, best
//     effort. A slot not released frees at the latest one lease later.
//
// Finish waits for at most one timeout (WithTimeout).
func (e *Engine) Finish(ctx context.Context, d Decision, o Outcome) error {
	return e.finish(ctx, &d, &o, false)
}

// finish is Finish; keepSlots leaves the slots held (the tests' settle).
func (e *Engine) finish(ctx context.Context, d *Decision, o *Outcome, keepSlots bool) error {
	t := d.admitted
	if t == nil || !d.Allowed {
		return nil
	}
	c := getCall()
	defer putCall(c)
	deltas, err := c.deltas(t, o.Actual)
	if err != nil {
		return err
	}
	if t.Local {
		c.finishing(t, o, deltas, keepSlots)
		e.local.Finish(t.ID, c.fin)
		return nil
	}
	if e.closed.Load() {
		return ErrClosed
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	c.finishing(t, o, deltas, keepSlots)
	if len(c.fin) == 0 {
		return nil
	}
	e.unhold(t, c.fin)
	c.pub = e.chanName
	err = e.finishRemote(c, c.finishName(o))
	if err == nil && o.GiveBack && e.rep != nil {
		e.replicateGiveBack(c.fin)
	}
	return err
}

// finishRemote sends c's finish op through the batcher; what fails is
// queued as an undo.
func (e *Engine) finishRemote(c *call, op string) error {
	e.route(c)
	if needsDown(c) {
		// Redis timed out and has not answered since: queue the work for
		// the batch that finds it back, instead of making the caller (a
		// handler that has answered) wait for another timeout.
		e.undos.Push(c.fin...)
		return &backendError{Op: op, Err: errNotAsked}
	}
	e.join(c)
	return e.finished(c, op)
}

// finished reads the outcome of c's finish op, which a batch ran: what
// failed is queued as an undo, and the keys it removed entries from are
// forgotten by this process's cache of denials.
func (e *Engine) finished(c *call, op string) error {
	if c.err != nil {
		e.requeueFinish(c)
		e.warnFailed(op, c.fin[0].Member, c.err)
		return &backendError{Op: op, Err: c.err}
	}
	var gone []string
	for i := range c.fin {
		switch c.res[i] {
		case 1:
			if u := &c.fin[i]; u.Publishes() {
				gone = append(gone, u.Key)
			}
		case 2:
			return &backendError{Op: op, Err: codec.NewReplyError("running total above 2^53", c.fin[i].Key)}
		}
	}
	// The script published the removals; this process forgets them now.
	e.forgetKnown(gone)
	return nil
}

// requeueFinish queues the work of c's failed script calls: all of it on
// a single server, the failed parts' elsewhere.
func (e *Engine) requeueFinish(c *call) {
	if e.group == groupAll {
		e.undos.Push(c.fin...)
		return
	}
	for i, p := range c.parts {
		if p.stat < 0 {
			for _, k := range c.part(i) {
				e.undos.Push(c.fin[k])
			}
		}
	}
}

// finishName names the operation of o in errors and logs.
func (c *call) finishName(o *Outcome) string {
	switch {
	case o.GiveBack:
		return "giveback"
	case o.Actual != nil:
		return "settle"
	}
	return "release"
}

// finishing makes c the finish op of t for o, settling by deltas (per key
// of t, nil for none): the work not done yet, one undo per key, claimed in
// t's state.
func (c *call) finishing(t *admission.Record, o *Outcome, deltas []int64, keepSlots bool) {
	c.mode, c.id = opFinish, t.ID
	want := uint32(0)
	if !keepSlots {
		want |= admission.DoneRelease
	}
	if o.GiveBack {
		want |= admission.DoneGiveBack | admission.DoneRelease
	}
	if deltas != nil {
		want |= admission.DoneSettle
	}
	c.fin = t.Finish(c.fin[:0], want, o.GiveBack, deltas)
	finishKeys(&c.plan, c.fin)
	c.res, c.all = c.res[:0], c.all[:0]
	for i := range c.fin {
		c.res, c.all = append(c.res, 0), append(c.all, int32(i))
	}
}

// deltas returns, per key of t, the change of its cost that actual asks
// for (nil for no settlement), in c's scratch space.
func (c *call) deltas(t *admission.Record, actual []int64) ([]int64, error) {
	if actual == nil {
		return nil, nil
	}
	d, changes, err := t.Deltas(actual, c.bleft)
	c.bleft = d
	if ce, ok := err.(*admission.CostError); ok {
		return nil, &requestError{Check: ce.Check, Window: -1, Reason: ce.Reason}
	}
	if !changes {
		return nil, nil // nothing to settle
	}
	return d, nil
}

// finishKeys makes the keys of p those of fin, for routing and the
// script's KEYS.
func finishKeys(p *plan.Plan, fin []codec.Undo) {
	p.KeysOnly()
	for i := range fin {
		p.Keys = append(p.Keys, fin[i].Key)
	}
}
