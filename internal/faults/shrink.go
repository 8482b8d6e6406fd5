package faults

// Shrink returns a scenario with as few steps as it can find that still fails:
// delta debugging over the steps (drop chunks of halving size while fails
// still reports a failure), then over the requests of each step. fails runs
// a scenario and reports whether it failed; it is called at most budget times,
// since each call runs a history against a backend.
func Shrink(p Scenario, budget int, fails func(Scenario) bool) Scenario {
	calls := 0
	try := func(q Scenario) bool {
		if calls >= budget {
			return false
		}
		calls++
		return fails(q)
	}
	for chunk := len(p.Steps) / 2; chunk >= 1; {
		removed := false
		for i := 0; i+chunk <= len(p.Steps); {
			q := p
			q.Steps = append(append([]Step(nil), p.Steps[:i]...), p.Steps[i+chunk:]...)
			if try(q) {
				p, removed = q, true
				continue
			}
			i += chunk
		}
		if !removed {
			chunk /= 2
		}
		if calls >= budget {
			break
		}
	}
	for i := range p.Steps {
		for j := 0; j < len(p.Steps[i].Reqs) && len(p.Steps[i].Reqs) > 1; {
			q := p
			q.Steps = append([]Step(nil), p.Steps...)
			rs := p.Steps[i].Reqs
			q.Steps[i].Reqs = append(append([]Req(nil), rs[:j]...), rs[j+1:]...)
			if try(q) {
				p = q
				continue
			}
			j++
		}
	}
	return p
}

// ShrinkThrottle is Shrink for a throttle's scenario: it drops chunks of
// steps, then calls of each step, while fails still reports a failure,
// calling fails at most budget times.
func ShrinkThrottle(p ThrottleScenario, budget int, fails func(ThrottleScenario) bool) ThrottleScenario {
	calls := 0
	try := func(q ThrottleScenario) bool {
		if calls >= budget {
			return false
		}
		calls++
		return fails(q)
	}
	for chunk := len(p.Steps) / 2; chunk >= 1 && calls < budget; {
		removed := false
		for i := 0; i+chunk <= len(p.Steps); {
			q := p
			q.Steps = append(append([]ThrottleStep(nil), p.Steps[:i]...), p.Steps[i+chunk:]...)
			if try(q) {
				p, removed = q, true
				continue
			}
			i += chunk
		}
		if !removed {
			chunk /= 2
		}
	}
	for i := range p.Steps {
		for j := 0; j < len(p.Steps[i].Calls) && len(p.Steps[i].Calls) > 1; {
			q := p
			q.Steps = append([]ThrottleStep(nil), p.Steps...)
			cs := p.Steps[i].Calls
			q.Steps[i].Calls = append(append([]ThrottleCall(nil), cs[:j]...), cs[j+1:]...)
			if try(q) {
				p = q
				continue
			}
			j++
		}
	}
	return p
}
