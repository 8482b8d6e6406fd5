package middleware

import (
	"context"
	"errors"
	"sync"

	"github.com/slidelimit/slidelimit/engine"
)

// A Settler changes what an admitted request counts in its cost limiters
// to what it really consumed; *engine.Engine implements it (see
// engine.Engine.Settle for the semantics). The middleware of a group with
// a settled cost (WithSettle) needs a Decider that is also a Settler.
type Settler interface {
	Settle(ctx context.Context, req engine.Request, d engine.Decision, actual []int64) error
}

// ErrNoSettle means WithSettle was given but the Decider cannot settle
// requests (it is not a Settler).
var ErrNoSettle = errors.New("middleware: WithSettle needs a decider that can settle requests (a Settler)")

// NoDebt is the Settlement.MaxDebt that refuses any debt.
const NoDebt = -1

// Settlement says how the limiters whose cost is one cost function settle
// after the handler (see WithSettle). The zero Settlement settles only to
// a cost the handler reports with ReportCost, with no cap on the debt.
type Settlement struct {
	// Written settles a request that reported no cost to the bytes of
	// response body its handler wrote to the client: what Write and
	// ReadFrom of the middleware's ResponseWriter accepted, so a download
	// the client abandoned counts what was sent before the connection
	// broke, plus what the server's and the kernel's socket buffers took
	// and never delivered (on loopback, 1 to 5 MiB beyond the 1 MiB a
	// client read in TestSettleAbortedDownload); a HEAD request or a 304
	// counts 0. Wrappers outside the middleware (compression) are not
	// seen.
	Written bool
	// MaxDebt caps what a request may be charged beyond its estimate (the
	// cost function's result): 0 charges the whole excess, a positive
	// value at most that much, NoDebt none (a request that used more than
	// its estimate stays charged its estimate). A debt is charged at the
	// request's admission time: later requests wait longer, and a window
	// may exceed its limit by the debt.
	MaxDebt int64
}

// WithSettle makes the limiters whose cost is the cost function name (as
// in user[bytes]:2Gi/d) settle once the handler has run: the request is
// admitted against its estimate, the cost function's result, as without
// WithSettle; afterwards it counts its actual cost instead, the one the
// handler reported with ReportCost or, with s.Written, the bytes written.
// A request whose actual cost is unknown (none reported, and not Written;
// a handler that panicked or hijacked the connection) keeps its estimate,
// erring on the side of denying. A request that a count: statement gives
// back is not settled. The Decider must be a Settler (New fails with
// ErrNoSettle otherwise). Registering a name again replaces its
// Settlement.
func WithSettle(name string, s Settlement) Option {
	return func(c *config) {
		switch {
		case !validCostName(name):
			c.fail("WithSettle", name, `invalid cost function name; want a letter, then letters, digits, "_", "-" or "."`)
			return
		case s.MaxDebt < NoDebt:
			c.fail("WithSettle", name, "MaxDebt below NoDebt")
			return
		}
		if c.settle == nil {
			c.settle = make(map[string]Settlement)
		}
		c.settle[name] = s
	}
}

// ReportCost reports n, the actual cost of the request whose context is
// ctx for the cost function name, to the middleware, which settles the
// request's limiters with that cost once the handler returns (see
// WithSettle): a handler calls it when it knows what the request consumed,
// such as the tokens of a completion. A later report replaces an earlier
// one. It returns false, and does nothing, when no settlement of name
// awaits the request (no limiter of its group settles name, the request
// was not admitted, or ctx is not the request's) or n is negative. It is
// safe for concurrent use.
func ReportCost(ctx context.Context, name string, n int64) bool {
	rep, _ := ctx.Value(reportKey{}).(*costReport)
	if rep == nil || n < 0 {
		return false
	}
	rep.mu.Lock()
	defer rep.mu.Unlock()
	for i, nm := range rep.names {
		if nm == name {
			rep.costs[i], rep.set[i] = n, true
			return true
		}
	}
	return false
}

type reportKey struct{}

// costReport holds what the handler reported, per settled cost name.
type costReport struct {
	mu    sync.Mutex
	names []string
	costs []int64
	set   []bool
}

// settles reports whether the steps after the handler settle c.
func (l *limiter) settles(c *call) bool { return l.settler != nil && c.p.settled }

// prepareSettle gives the handler of c a context to report costs to.
func (l *limiter) prepareSettle(c *call) {
	rep := &costReport{}
	for i, s := range c.p.settle {
		if s != nil && !contains(rep.names, c.p.costs[i].name) {
			rep.names = append(rep.names, c.p.costs[i].name)
		}
	}
	rep.costs, rep.set = make([]int64, len(rep.names)), make([]bool, len(rep.names))
	c.report = rep
	c.r = c.r.WithContext(context.WithValue(c.r.Context(), reportKey{}, rep))
}

func contains(ss []string, s string) bool {
	for _, x := range ss {
		if x == s {
			return true
		}
	}
	return false
}

// actualCosts returns the actual costs of a request of a group with
// settled costs, for engine.Outcome.Actual: each settled limiter's cost as
// the handler reported it, or the bytes written (see WithSettle), -1 for
// the others; nil when nothing settles. A request given back, or whose
// handler panicked or hijacked the connection, keeps its estimate.
func (l *limiter) actualCosts(c *call, o outcome, written int64) []int64 {
	if !l.settles(c) || !c.dec.Allowed || o.panicked || o.hijacked || l.givesBack(o) {
		return nil
	}
	actual := make([]int64, len(c.checks))
	some := false
	for i := range actual {
		actual[i] = -1
		s := c.p.settle[i]
		if s == nil {
			continue
		}
		n, ok := c.report.get(c.p.costs[i].name)
		if !ok && s.Written {
			n, ok = written, true
		}
		if !ok {
			continue
		}
		if est := c.checks[i].Cost; n > est {
			switch {
			case s.MaxDebt == NoDebt:
				n = est
			case s.MaxDebt > 0:
				n = min(n, est+s.MaxDebt)
			}
		}
		actual[i], some = n, true
	}
	if !some {
		return nil
	}
	return actual
}

// get returns the cost reported for name, if any.
func (rep *costReport) get(name string) (int64, bool) {
	rep.mu.Lock()
	defer rep.mu.Unlock()
	for i, nm := range rep.names {
		if nm == name {
			return rep.costs[i], rep.set[i]
		}
	}
	return 0, false
}

// settleWith marks the limiters of p whose cost function settles (see
// WithSettle).
func (p *plan) settleWith(settle map[string]Settlement) {
	if len(settle) == 0 {
		return
	}
	p.settle = make([]*Settlement, len(p.Limiters))
	for i, c := range p.costs {
		if s, ok := settle[c.name]; ok && c.fn != nil {
			p.settle[i], p.settled = &s, true
		}
	}
}
