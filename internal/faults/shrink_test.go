package faults

import (
	"slices"
	"testing"
)

// TestShrink: a scenario failing when it holds a kill and, later, a request of
// engine 1 shrinks to those two steps.
func TestShrink(t *testing.T) {
	p := Generate(7, Caps{Persist: true, Nodes: 1})
	p.Steps = append(p.Steps, Step{Kind: Kill}, Step{Kind: Requests, Reqs: []Req{{Engine: 0, Subject: 0}, {Engine: 1, Subject: 0}, {Engine: 0, Subject: 1}}})
	fails := func(q Scenario) bool {
		k := slices.IndexFunc(q.Steps, func(s Step) bool { return s.Kind == Kill })
		return k >= 0 && slices.ContainsFunc(q.Steps[k:], func(s Step) bool {
			return s.Kind == Requests && slices.Contains(s.Reqs, Req{Engine: 1, Subject: 0})
		})
	}
	got := Shrink(p, 1000, fails)
	if len(got.Steps) != 2 || got.Steps[0].Kind != Kill || !slices.Equal(got.Steps[1].Reqs, []Req{{Engine: 1, Subject: 0}}) {
		t.Fatalf("shrunk to\n%v", got)
	}
}

func TestGenerateDeterministic(t *testing.T) {
	caps := Caps{Sleep: true, Persist: true, Nodes: 3}
	a, b := Generate(42, caps), Generate(42, caps)
	if a.String() != b.String() {
		t.Fatalf("seed 42 gave two scenarios:\n%v\n%v", a, b)
	}
	if a.String() == Generate(43, caps).String() {
		t.Fatal("seeds 42 and 43 gave the same scenario")
	}
}
