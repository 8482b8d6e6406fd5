package faults

import (
	"strings"
	"testing"
	"time"
)

const ms = time.Millisecond

// throttleHist returns a history of one key(k):2/1000ms rule with the
// harness's settings.
func throttleHist(calls ...CallRecord) ThrottleHistory {
	return ThrottleHistory{
		Rules: []ThrottleRule{{Key: true, Windows: []Window{{Limit: 2, Period: time.Second}}}},
		Keys:  1, Calls: calls, Lease: time.Second, SlotRetry: time.Second,
		Bound: 500 * ms, Settle: 4500 * ms, End: 3 * time.Second,
	}
}

// admitted is a call arriving at a, admitted at d, seen by the upstream
// 1 ms later and finished 10 ms after that.
func admitted(a, d time.Duration) CallRecord {
	return CallRecord{Actual: -1, Arrived: a, Ended: d, Admitted: true, Decided: d, Upstream: d + ms, Finished: d + 11*ms}
}

func violations(rep ThrottleReport, property string) []string {
	var out []string
	for _, v := range rep.Violations {
		if v.Property == property {
			out = append(out, v.Detail)
		}
	}
	return out
}

func TestThrottleWindow(t *testing.T) {
	// Three admissions within a second of a 2/1000ms window.
	h := throttleHist(admitted(0, 10*ms), admitted(0, 20*ms), admitted(0, 900*ms))
	if vs := violations(CheckThrottle(h), "window"); len(vs) == 0 {
		t.Fatal("three admissions in one period of 2/1000ms passed")
	}
	// The third leaves the first's period: fine.
	h = throttleHist(admitted(0, 10*ms), admitted(0, 20*ms), admitted(0, 1010*ms))
	if vs := violations(CheckThrottle(h), "window"); len(vs) > 0 {
		t.Fatalf("a third admission after the period: %v", vs)
	}
	// A restart empty between them: the epoch after it may hold 2 more.
	h = throttleHist(admitted(0, 10*ms), admitted(0, 20*ms), admitted(0, 500*ms), admitted(0, 510*ms))
	h.Losses = []time.Duration{300 * ms}
	if vs := violations(CheckThrottle(h), "window"); len(vs) > 0 {
		t.Fatalf("two epochs of 2 each: %v", vs)
	}
	h.Calls = append(h.Calls, admitted(0, 520*ms))
	if vs := violations(CheckThrottle(h), "window"); len(vs) == 0 {
		t.Fatal("three admissions in one epoch passed")
	}
}

func TestThrottleWindowCosts(t *testing.T) {
	h := throttleHist()
	h.Rules = []ThrottleRule{{Key: true, Cost: "tokens", Windows: []Window{{Limit: 10, Period: time.Second}}}}
	a, b := admitted(0, 10*ms), admitted(0, 20*ms)
	a.Cost, b.Cost = 6, 6
	a.Actual = 3 // settled lower: 9 of 10
	h.Calls = []CallRecord{a, b}
	if vs := violations(CheckThrottle(h), "window"); len(vs) > 0 {
		t.Fatalf("9 tokens of 10: %v", vs)
	}
	h.Calls[0].Actual = 5 // 11 of 10
	if vs := violations(CheckThrottle(h), "window"); len(vs) == 0 {
		t.Fatal("11 tokens of 10 passed")
	}
	h.Calls[0].Actual = -1
	h.Calls[0].Finished = 0
	h.Calls[1].Actual = 20 // a debt: counts its estimate
	if vs := violations(CheckThrottle(h), "window"); len(vs) == 0 {
		t.Fatal("12 tokens of 10 passed")
	}
}

// The transit bound: the throttle keeps each admission Transit longer, and
// the upstream counts each call at its decision plus its transit.
func TestThrottleWindowTransit(t *testing.T) {
	h := throttleHist(admitted(0, 0), admitted(0, 10*ms), admitted(0, 1060*ms))
	h.Transit = 50 * ms
	h.Calls[0].Transit = 49 * ms
	if vs := violations(CheckThrottle(h), "window"); len(vs) > 0 {
		t.Fatalf("calls a period plus the transit bound apart: %v", vs)
	}
	// A third call a period after the first but within the transit bound:
	// the upstream may see three in one of its windows.
	h.Calls[2].Decided = 1000 * ms
	if vs := violations(CheckThrottle(h), "window"); len(vs) == 0 {
		t.Fatal("three within a period plus the transit bound passed")
	}
	// Spaced right, but two calls took longer than the bound to arrive:
	// the upstream's window at 1060 ms holds 65, 80 and 1060 ms.
	h.Calls[2].Decided = 1060 * ms
	h.Calls[0].Transit, h.Calls[1].Transit = 65*ms, 70*ms
	vs := violations(CheckThrottle(h), "window")
	if len(vs) == 0 || !strings.Contains(vs[0], "upstream") {
		t.Fatalf("three arrivals in one upstream window: %v", vs)
	}
	// Calls never seen by the upstream count only in the throttle's view.
	h.Calls[0].Upstream = -1
	if vs := violations(CheckThrottle(h), "window"); len(vs) > 0 {
		t.Fatalf("a call that never reached the upstream: %v", vs)
	}
}

// The idle property counts room over the period plus the transit bound.
func TestThrottleIdleTransit(t *testing.T) {
	w := CallRecord{Actual: -1, Arrived: 1000 * ms, Ended: 1605 * ms, Admitted: true, Decided: 1605 * ms,
		Upstream: 1606 * ms, Finished: 1610 * ms}
	h := throttleHist(admitted(0, 0), admitted(0, 10*ms), w)
	if vs := violations(CheckThrottle(h), "idle"); len(vs) == 0 {
		t.Fatal("a waiter with room from 1010 ms admitted at 1605 ms passed")
	}
	h.Transit = 600 * ms // room from 1610 ms on
	if vs := violations(CheckThrottle(h), "idle"); len(vs) > 0 {
		t.Fatalf("no room before 1610 ms: %v", vs)
	}
}

// In a paced history (one with shares) a waiter's room counts from its
// lane's next slot: the longer of the pace interval and the window's time
// until its oldest entry leaves over the calls left plus one.
func TestThrottleIdlePaced(t *testing.T) {
	hist := func(decided time.Duration) ThrottleHistory {
		w := CallRecord{Actual: -1, Arrived: 10 * ms, Ended: decided, Admitted: true, Decided: decided,
			Upstream: decided + ms, Finished: decided + 11*ms}
		h := throttleHist(admitted(0, 0), w)
		h.Rules[0].Windows = []Window{{Limit: 4, Period: 2 * time.Second}}
		return h
	}
	h := hist(900 * ms)
	if vs := violations(CheckThrottle(h), "idle"); len(vs) == 0 {
		t.Fatal("unpaced: a waiter with room from 10 ms admitted at 900 ms passed")
	}
	h.Shares = []ThrottleShare{{Class: "a", Percent: 30}}
	// 3 calls left over 2 s: the next slot is 500 ms after the first.
	if vs := violations(CheckThrottle(h), "idle"); len(vs) > 0 {
		t.Fatalf("paced: its slot came at 500 ms: %v", vs)
	}
	h = hist(1100 * ms)
	h.Shares = []ThrottleShare{{Class: "a", Percent: 30}}
	if vs := violations(CheckThrottle(h), "idle"); len(vs) == 0 {
		t.Fatal("paced: a waiter with room and a slot from 500 ms admitted at 1100 ms passed")
	}
}

func TestThrottleSlots(t *testing.T) {
	h := throttleHist()
	h.Rules[0].Windows = []Window{{Limit: 1, Concurrent: true}}
	a, b := admitted(0, 10*ms), admitted(0, 15*ms)
	a.Finished = 500 * ms
	h.Calls = []CallRecord{a, b}
	if vs := violations(CheckThrottle(h), "slots"); len(vs) == 0 {
		t.Fatal("two holders of 1 concurrent passed")
	}
	// a's process died at 100 ms holding it: its slot frees from
	// 100 + 2/3 lease on.
	h.Calls[0].Finished, h.Calls[0].Proc = 0, 7
	h.Deaths = []Death{{Proc: 7, At: 100 * ms}}
	h.Calls[1].Decided, h.Calls[1].Finished = 700*ms, 900*ms
	if vs := violations(CheckThrottle(h), "slots"); len(vs) == 0 {
		t.Fatal("a dead holder's slot taken before its lease could end passed")
	}
	h.Calls[1].Decided = 800 * ms
	if vs := violations(CheckThrottle(h), "slots"); len(vs) > 0 {
		t.Fatalf("a dead holder's slot taken after 2/3 of a lease: %v", vs)
	}
}

func TestThrottleIdle(t *testing.T) {
	// The window is empty from the start; the waiter waits 800 ms.
	h := throttleHist(admitted(0, 800*ms))
	vs := violations(CheckThrottle(h), "idle")
	if len(vs) == 0 {
		t.Fatal("a waiter with room waited 800 ms unnoticed")
	}
	// Within the bound.
	h = throttleHist(admitted(0, 400*ms))
	if rep := CheckThrottle(h); len(rep.Violations) > 0 || rep.LongestIdle < 390*ms {
		t.Fatalf("a wait of 400 ms: %v, longest %v", rep.Violations, rep.LongestIdle)
	}
	// A full window: two admissions at 0 and 10 ms; a third waiter
	// arriving at 20 ms has room from 1000 ms on, admitted at 1300 ms.
	h = throttleHist(admitted(0, 0), admitted(0, 10*ms), admitted(20*ms, 1300*ms))
	if vs := violations(CheckThrottle(h), "idle"); len(vs) > 0 {
		t.Fatalf("admitted 300 ms after the room came: %v", vs)
	}
	h.Calls[2].Decided, h.Calls[2].Ended = 1600*ms, 1600*ms
	if vs := violations(CheckThrottle(h), "idle"); len(vs) == 0 {
		t.Fatal("admitted 600 ms after the room came, unnoticed")
	}
	// ... unless a fault came shortly before.
	h.Faults = []Span{{From: 900 * ms, To: 950 * ms, Why: "kill"}}
	if vs := violations(CheckThrottle(h), "idle"); len(vs) > 0 {
		t.Fatalf("after a fault: %v", vs)
	}
	// ... or a learned block held the lane until 1200 ms.
	h.Faults = nil
	h.Blocks = []Block{{Key: 0, From: 5 * ms, To: 1200 * ms}}
	if vs := violations(CheckThrottle(h), "idle"); len(vs) > 0 {
		t.Fatalf("after a block: %v", vs)
	}
	// A waiter of another lane has no say.
	h.Blocks = nil
	h.Keys = 2
	h.Calls[2].Key = 1
	if vs := violations(CheckThrottle(h), "idle"); len(vs) == 0 {
		t.Fatal("a waiter of an empty lane waited 1.6 s unnoticed")
	}
}

// A dead holder's slot frees within a lease; the head refused for it asks
// again SlotRetry later.
func TestThrottleIdleSlots(t *testing.T) {
	h := throttleHist()
	h.Rules[0].Windows = []Window{{Limit: 1, Concurrent: true}}
	a := admitted(0, 0)
	a.Finished, a.Proc = 0, 7
	h.Deaths = []Death{{Proc: 7, At: 100 * ms}}
	h.Settle = 0 // the death excludes nothing here
	b := admitted(10*ms, 1900*ms)
	h.Calls = []CallRecord{a, b}
	// Room from 1100 ms (the lease) on; admitted 800 ms later: within
	// SlotRetry + Bound.
	if vs := violations(CheckThrottle(h), "idle"); len(vs) > 0 {
		t.Fatalf("admitted within a slot retry of the lease's end: %v", vs)
	}
	h.Calls[1].Decided, h.Calls[1].Ended = 2700*ms, 2700*ms
	if vs := violations(CheckThrottle(h), "idle"); len(vs) == 0 {
		t.Fatal("a slot held 1.6 s past its dead holder's lease, unnoticed")
	}
	// A slot freed by a Finish: the bound alone.
	h.Calls[0].Finished, h.Deaths = 300*ms, nil
	h.Calls[1].Decided, h.Calls[1].Ended = 900*ms, 900*ms
	if vs := violations(CheckThrottle(h), "idle"); len(vs) == 0 {
		t.Fatal("admitted 600 ms after a Finish freed its slot, unnoticed")
	}
}

func TestGenerateThrottle(t *testing.T) {
	caps := Caps{Sleep: true, Persist: true, Nodes: 1}
	a, b := GenerateThrottle(5, caps), GenerateThrottle(5, caps)
	if a.String() != b.String() {
		t.Fatal("a seed gave two scenarios")
	}
	kinds := map[ThrottleKind]bool{}
	var costs, concurrent, transport, blocks, drops, cancels bool
	for seed := uint64(1); seed <= 200; seed++ {
		p := GenerateThrottle(seed, caps)
		if len(p.Rules) == 0 || p.Procs < 2 {
			t.Fatalf("seed %d: %v", seed, p)
		}
		for _, l := range p.Rules {
			costs = costs || l.Cost != ""
			for _, w := range l.Windows {
				concurrent = concurrent || w.Concurrent
			}
		}
		for _, s := range p.Steps {
			kinds[s.Kind] = true
			for _, c := range s.Calls {
				transport = transport || c.Transport
				blocks = blocks || c.RetryAfter > 0
				drops = drops || c.Drop
				cancels = cancels || c.Cancel > 0
			}
		}
	}
	if len(kinds) != int(numThrottleKinds) || !costs || !concurrent || !transport || !blocks || !drops || !cancels {
		t.Fatalf("200 seeds miss something: kinds %v, costs %v, concurrent %v, transport %v, blocks %v, drops %v, cancels %v",
			kinds, costs, concurrent, transport, blocks, drops, cancels)
	}
}

// On a Cluster a call's keys may be decided by several masters' clocks
// during the call: a span is over only if it surely is.
func TestThrottleWindowSpread(t *testing.T) {
	h := throttleHist(admitted(0, 10*ms), admitted(0, 20*ms), admitted(0, 1005*ms))
	if vs := violations(CheckThrottle(h), "window"); len(vs) == 0 {
		t.Fatal("three in 995 ms of 2/1000ms passed")
	}
	for i := range h.Calls {
		h.Calls[i].Spread = 10 * ms
	}
	// By its master's clock the first may have been decided at 0 and
	// the last at 1015 ms: the span is over only if it surely is.
	if vs := violations(CheckThrottle(h), "window"); len(vs) > 0 {
		t.Fatalf("three that may lie 1015 ms apart: %v", vs)
	}
}

// A slot lost to a late renewal lets the window hold one call more.
func TestThrottleSlotsLost(t *testing.T) {
	h := throttleHist()
	h.Rules[0].Windows = []Window{{Limit: 1, Concurrent: true}}
	a, b := admitted(0, 10*ms), admitted(0, 1500*ms)
	a.Finished = 0 // never finished, its process alive: held for good
	h.Calls = []CallRecord{a, b}
	if vs := violations(CheckThrottle(h), "slots"); len(vs) == 0 {
		t.Fatal("a second holder of 1 concurrent passed")
	}
	h.SlotsLost = []time.Duration{1400 * ms}
	if vs := violations(CheckThrottle(h), "slots"); len(vs) > 0 {
		t.Fatalf("a second holder after a slot was lost: %v", vs)
	}
}

// A lease after its holder died, a slot must be free.
func TestThrottleLease(t *testing.T) {
	h := throttleHist()
	h.Rules[0].Windows = []Window{{Limit: 2, Concurrent: true}}
	a, b := admitted(0, 10*ms), admitted(0, 20*ms)
	a.Finished, a.Proc = 0, 7 // held when its process died
	b.Finished = 0            // never finished, its process alive
	h.Calls = []CallRecord{a, b}
	h.Deaths = []Death{{Proc: 7, At: 100 * ms}}
	h.Peeks = []SlotPeek{{At: 1350 * ms, Rule: 0, Subject: 0, Used: 1}}
	if vs := violations(CheckThrottle(h), "lease"); len(vs) > 0 {
		t.Fatalf("one live slot, the dead one's gone: %v", vs)
	}
	h.Peeks[0].Used = 2
	if vs := violations(CheckThrottle(h), "lease"); len(vs) == 0 {
		t.Fatal("a dead holder's slot live 1.25 s after its death (lease 1 s) passed")
	}
	h.Peeks[0].At = 900 * ms // within its lease
	if vs := violations(CheckThrottle(h), "lease"); len(vs) > 0 {
		t.Fatalf("within the lease: %v", vs)
	}
}

// With a longest hold, a Permit never finished frees its slot then.
func TestThrottleMaxHold(t *testing.T) {
	h := throttleHist()
	h.Rules[0].Windows = []Window{{Limit: 1, Concurrent: true}}
	h.MaxHold = 1500 * ms
	h.End = 4 * time.Second
	a, b := admitted(0, 10*ms), admitted(20*ms, 1200*ms)
	a.Finished = 0 // never finished, its process alive
	h.Calls = []CallRecord{a, b}
	if vs := violations(CheckThrottle(h), "slots"); len(vs) == 0 {
		t.Fatal("a slot taken before the longest hold ended passed")
	}
	h.Calls[1].Decided, h.Calls[1].Ended, h.Calls[1].Finished = 1600*ms, 1600*ms, 1700*ms
	if rep := CheckThrottle(h); len(rep.Violations) > 0 {
		t.Fatalf("a slot taken after the longest hold: %v", rep.Violations)
	}
	// Room from 1510 ms on: admitted within the slot retry and the bound.
	h.Calls[1].Decided, h.Calls[1].Ended, h.Calls[1].Finished = 3200*ms, 3200*ms, 3300*ms
	if vs := violations(CheckThrottle(h), "idle"); len(vs) == 0 {
		t.Fatal("a slot held 1.7 s past the longest hold, unnoticed")
	}
}

// Arrivals within Skew are in no known order: the fleet may serve a
// waiter without room first, and the oldest by the harness's clock waits.
func TestThrottleIdleSkew(t *testing.T) {
	// 3 tokens per 1000ms: after a call of cost 2 admitted at 100 ms, one
	// of cost 1 arrived at 10 ms has room and waits until 950 ms, while
	// one of cost 3 arrived 1 ms after it has none and gives up at 960 ms.
	h := throttleHist(admitted(0, 100*ms), admitted(10*ms, 950*ms), CallRecord{Actual: -1, Arrived: 11 * ms, Ended: 960 * ms})
	h.Rules[0].Cost = "tokens"
	h.Rules[0].Windows[0].Limit = 3
	h.Calls[0].Cost, h.Calls[1].Cost, h.Calls[2].Cost = 2, 1, 3
	if vs := violations(CheckThrottle(h), "idle"); len(vs) == 0 {
		t.Fatal("the oldest waiter with room waited 800 ms unnoticed")
	}
	h.Skew = 5 * ms
	if vs := violations(CheckThrottle(h), "idle"); len(vs) > 0 {
		t.Fatalf("a waiter within the skew had no room: %v", vs)
	}
	// Arrived 6 ms later, the one without room is no excuse.
	h.Calls[2].Arrived = 16 * ms
	if vs := violations(CheckThrottle(h), "idle"); len(vs) == 0 {
		t.Fatal("the oldest waiter with room waited 800 ms behind a later one unnoticed")
	}
}
