package lifecycle

import (
	"context"
	"sync"

	"github.com/slidelimit/slidelimit/engine"
)

// Settle is how the rules whose cost is one cost function settle after
// the handler: middleware.Settlement, which grpclimit.WithSettle takes too
// (see middleware.WithSettle for the meaning of the fields).
type Settle struct {
	Written bool  // settle a request that reported nothing to the bytes it sent
	MaxDebt int64 // 0 no cap, > 0 at most that much above the estimate, NoDebt none
}

// NoDebt is the Settle.MaxDebt that refuses any debt (-1 in middleware.Settlement).
const NoDebt = -1

// SettleProblem returns why name and s cannot settle (for a
// ConfigError's Reason), or "" when they can.
func SettleProblem(name string, s Settle) string {
	switch {
	case !ValidCostName(name):
		return `invalid cost function name; want a letter, then letters, digits, "_", "-" or "."`
	case s.MaxDebt < NoDebt:
		return "MaxDebt below -1 (no debt)"
	}
	return ""
}

// PutSettle sets (*m)[name] to s, making the map when needed, and returns
// "" — or, changing nothing, why name and s cannot settle (SettleProblem).
// It is the body of every transport's WithSettle option.
func PutSettle(m *map[string]Settle, name string, s Settle) string {
	if reason := SettleProblem(name, s); reason != "" {
		return reason
	}
	if *m == nil {
		*m = make(map[string]Settle)
	}
	(*m)[name] = s
	return ""
}

// ValidCostName reports whether s is a cost function name as package rules
// accepts it: a letter, then letters, digits, '_', '-' or '.'.
func ValidCostName(s string) bool {
	if s == "" || !isASCIILetter(s[0]) {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !isASCIILetter(c) && !('0' <= c && c <= '9') && c != '_' && c != '-' && c != '.' {
			return false
		}
	}
	return true
}

func isASCIILetter(c byte) bool { return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' }

// SettleWith marks the rules of p whose cost function has a Settle in
// settle; a rule whose cost is none or a constant never settles.
func (p *Plan) SettleWith(settle map[string]Settle) {
	p.Settle, p.settled = nil, nil
	for i, l := range p.Rules {
		s, ok := settle[l.Cost]
		if !ok || l.Cost == "" || IsDecimal(l.Cost) {
			continue
		}
		if p.Settle == nil {
			p.Settle = make([]*Settle, len(p.Rules))
		}
		p.Settle[i] = &s
		if !contains(p.settled, l.Cost) {
			p.settled = append(p.settled, l.Cost)
		}
	}
}

// Settles reports whether some rule of p settles (SettleWith).
func (p *Plan) Settles() bool { return p.Settle != nil }

// SettlesWritten reports whether some rule of p settles to the bytes
// written (Settle.Written): the transport must count them.
func (p *Plan) SettlesWritten() bool {
	for _, s := range p.Settle {
		if s != nil && s.Written {
			return true
		}
	}
	return false
}

// Reporting returns ctx carrying a CostReport for p's settled cost
// functions, which the handler fills with Report, and that report. The
// handler must run with the returned context.
func (p *Plan) Reporting(ctx context.Context) (context.Context, *CostReport) {
	rep := &CostReport{names: p.settled, costs: make([]int64, len(p.settled)), set: make([]bool, len(p.settled))}
	return context.WithValue(ctx, reportKey{}, rep), rep
}

// Report records n as the actual cost, for cost function name, of the
// request whose context is ctx (see middleware.ReportCost, which is this
// function for every transport). It returns false, and does nothing, when
// ctx carries no report awaiting name (Plan.Reporting) or n is negative.
// A later report replaces an earlier one. It is safe for concurrent use.
func Report(ctx context.Context, name string, n int64) bool {
	rep, _ := ctx.Value(reportKey{}).(*CostReport)
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

// A CostReport holds what a handler reported (Report), per settled cost
// function name. It is safe for concurrent use.
type CostReport struct {
	mu    sync.Mutex
	names []string // shared with the plan: read only
	costs []int64
	set   []bool
}

// get returns the cost reported for name, if any.
func (rep *CostReport) get(name string) (int64, bool) {
	rep.mu.Lock()
	defer rep.mu.Unlock()
	for i, nm := range rep.names {
		if nm == name {
			return rep.costs[i], rep.set[i]
		}
	}
	return 0, false
}

// Actual returns the actual costs of an admitted request of p's checks,
// for engine.Outcome.Actual: each settled rule's cost as the handler
// reported it in rep or, with Settle.Written, written (the bytes the
// transport sent; negative when it does not know), capped by MaxDebt; -1
// for the others. It returns nil when no cost is known: the request keeps
// its estimates. The caller passes nil for a request whose actual cost is
// unknown as a whole (a panic, a hijack) or that is given back.
func (p *Plan) Actual(checks []engine.Check, rep *CostReport, written int64) []int64 {
	if p.Settle == nil || rep == nil {
		return nil
	}
	var actual []int64
	for i, s := range p.Settle {
		if s == nil {
			continue
		}
		n, ok := rep.get(p.Rules[i].Cost)
		if !ok && s.Written && written >= 0 {
			n, ok = written, true
		}
		if !ok {
			continue
		}
		if est := checks[i].Cost; n > est {
			switch {
			case s.MaxDebt == NoDebt:
				n = est
			case s.MaxDebt > 0:
				n = min(n, est+s.MaxDebt)
			}
		}
		if actual == nil {
			actual = make([]int64, len(checks))
			for j := range actual {
				actual[j] = -1
			}
		}
		actual[i] = n
	}
	return actual
}

func contains(ss []string, s string) bool {
	for _, x := range ss {
		if x == s {
			return true
		}
	}
	return false
}
