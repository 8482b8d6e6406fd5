// Package lifecycle is a request's life under a rule group, written once
// for every transport: the Admission (admission.go) runs resolve the
// caller → price → decide → respond, the transport runs its handler, and
// Admission.Finish finishes the request through the one Finisher. The
// net/http middleware and contrib/grpclimit (through the public package
// transport) only translate: their requests into a Source (scope,
// subjects, costs, limits), the Verdict into headers, trailers and status
// codes, and their handlers' ends into an Outcome. What does not depend
// on the transport lives here too: the advertised policies and their
// field values (Plan), subjects and client addresses (ClientIP), what a
// group applies (Rules, Block, HoldsSlots), settlement (Plan.SettleWith,
// the handler's Report, Plan.Actual), the one backend-error log and the
// events hooks receive (Event). So does what the module's packages need of
// a rule group beyond package rules' API (group.go: Lists, Counts, limit
// functions' Resolve) and the rule language of other transports
// (dialect.go: Relocate; rules.Dialect parses).
package lifecycle

import (
	"time"

	"github.com/slidelimit/slidelimit/engine"
	"github.com/slidelimit/slidelimit/rules"
)

// Block returns the block a denial by one of g's rules starts: g.Block,
// or zero in shadow mode. A shadow group never refuses a request, and a
// block it started would refuse the subject at once, for the rest of the
// block, when the group is switched to enforce.
func Block(g *rules.Group) time.Duration {
	if g.Mode == rules.Shadow {
		return 0
	}
	return g.Block
}

// HoldsSlots reports whether some rule of g, default or a role's, has
// an in-flight window: admitted requests then hold slots that the
// transport must have released (Admission.Finish) when they end.
func HoldsSlots(g *rules.Group) bool {
	for _, ls := range Lists(g) {
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

// countsDistinct reports whether rule l counts the group's distinct
// values (distinct:NAME): a rule without a cost with a window that is
// not in-flight.
func countsDistinct(l rules.Rule) bool {
	if l.Cost != "" {
		return false
	}
	for _, w := range l.Windows {
		if !w.Concurrent {
			return true
		}
	}
	return false
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
