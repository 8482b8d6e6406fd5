package faults

import "testing"

func TestHeldSettledThenGivenBack(t *testing.T) {
	// The engine ignores a give-back of a settled request: Redis still
	// holds what it was settled to (found by redis seed
	// 712996795088697415: a cost of 16 settled to 54, then given back).
	w := Window{Limit: 40, Period: 2 * sec}
	h := History{Windows: []Window{w}, Fail: "local", Decisions: []Decision{
		{Step: 0, Proc: 1, Subject: "s", Allowed: true, Source: Redis, Cost: 16, Settled: true, Actual: 54, Back: 1, GivenBack: true},
	}}
	if n := Held(h, "s", w, 0); n != 54 {
		t.Fatalf("settled, then given back: Held = %d, want 54", n)
	}
	// A settlement to the cost changes nothing: the give-back removes it.
	h.Decisions[0].Actual = 16
	if n := Held(h, "s", w, 0); n != 0 {
		t.Fatalf("settled to its cost, then given back: Held = %d, want 0", n)
	}
	// Either call failed: the give-back may have run first.
	h.Decisions[0].Actual, h.Decisions[0].Unsure = 54, true
	if n := Held(h, "s", w, 0); n != 54 {
		t.Fatalf("unsure: Held = %d, want 54", n)
	}
}

func TestModelSettledThenGivenBack(t *testing.T) {
	// A settled request given back still counts against the windows: a
	// second admission of the whole limit is one too many.
	w := Window{Limit: 40, Period: 10 * sec}
	h := History{Windows: []Window{w}, Fail: "local", Decisions: []Decision{
		{Step: 1, At: sec, Proc: 1, Subject: "s", Allowed: true, Source: Redis, Cost: 20, Settled: true, Actual: 10, Back: 2, GivenBack: true},
		{Step: 3, At: 2 * sec, Proc: 1, Subject: "s", Allowed: true, Source: Redis, Cost: 40},
	}}
	if vs := Check(h); len(vs) != 1 {
		t.Fatalf("got %d violations, want 1: %v", len(vs), vs)
	}
	h.Decisions[0].Actual = 20 // no settlement ran: the give-back did
	if vs := Check(h); len(vs) != 0 {
		t.Fatalf("got %d violations, want 0: %v", len(vs), vs)
	}
}
