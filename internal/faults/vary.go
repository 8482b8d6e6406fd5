package faults

import "math/rand/v2"

// vary gives a scenario the statements that make limits vary, each to about a
// third of the scenarios, independently: roles (an exempt role, a role counted
// by IP, a role with rules of its own: see RoleExempt), a window
// whose limit is a limit function's ($quota, a value per request), and
// rule overrides pushed at run time (Override steps, changing the group's
// limits for every engine from that step on). Its draws come from a stream
// of their own, after the rest of the scenario is drawn: a scenario without them
// is the scenario its seed gave before they were generated, and one with them
// has the same windows, requests and faults.
//
// An override changes limits, never periods: the engine's keys keep what
// their longest window needs, so a change that lengthens a window may
// admit more than its limit during its first window (docs/limits.md), a
// documented limit the model does not bound.
func vary(p *Scenario, seed uint64) {
	r := rand.New(rand.NewPCG(seed, 0x11e175))
	roles := r.IntN(3) == 0
	dynamic := r.IntN(3) == 0
	overrides := r.IntN(3) == 0
	// around returns a limit near l: half, the same, one more, or double.
	around := func(l int64) int64 {
		switch r.IntN(4) {
		case 0:
			return max(l/2, 1)
		case 1:
			return l
		case 2:
			return l + 1
		}
		return 2 * l
	}
	if roles {
		for _, w := range p.Windows {
			p.RoleLimits = append(p.RoleLimits, around(w.Limit))
		}
	}
	if dynamic {
		var rates []int // the windows a limit function may give: not in-flight ones
		for i, w := range p.Windows {
			if !w.Concurrent {
				rates = append(rates, i)
			}
		}
		p.LimitFunc = 1 + rates[r.IntN(len(rates))]
	}
	if !roles && !dynamic && !overrides {
		return
	}
	var steps []Step
	for i, s := range p.Steps {
		if overrides && i > 0 && r.IntN(12) == 0 {
			o := Step{Kind: Override}
			for j, w := range p.Windows {
				l := around(w.Limit)
				if j == p.LimitFunc-1 {
					l = 0 // the override keeps $quota
				}
				o.Limits = append(o.Limits, l)
			}
			steps = append(steps, o)
		}
		if s.Kind == Requests {
			s.Reqs = append([]Req(nil), s.Reqs...)
			for k := range s.Reqs {
				q := &s.Reqs[k]
				if roles {
					switch x := r.IntN(20); {
					case x < 3:
						q.Role = RoleExempt
					case x < 7:
						q.Role = RoleByIP
					case x < 10:
						q.Role = RoleWithRules
					}
				}
				if dynamic {
					q.Limit = around(p.Windows[p.LimitFunc-1].Limit)
				}
			}
		}
		steps = append(steps, s)
	}
	p.Steps = steps
}
