package faults

import (
	"testing"
	"time"
)

// fairHist returns a Fair history of one global:100/1000ms rule (room
// throughout) with share(a):30%.
func fairHist(calls ...CallRecord) ThrottleHistory {
	h := throttleHist(calls...)
	h.Rules = []ThrottleRule{{Windows: []Window{{Limit: 100, Period: time.Second}}}}
	h.Shares, h.Fair = []ThrottleShare{{Class: "a", Percent: 30}}, true
	return h
}

// of gives c a class and a tenant.
func of(c CallRecord, class, tenant string) CallRecord {
	c.Class, c.Tenant = class, tenant
	return c
}

func TestThrottleFairShare(t *testing.T) {
	// Both classes wait from 0 to 2 s; 10 admissions meanwhile.
	var calls []CallRecord
	calls = append(calls, of(admitted(0, 2000*ms), "a", ""), of(admitted(0, 2000*ms), "b", ""))
	for i := range 10 {
		calls = append(calls, of(admitted(0, time.Duration(100+100*i)*ms), "b", ""))
	}
	h := fairHist(calls...)
	h.End = 3 * time.Second
	// Class a got none of 10 (30% less the slack: 1).
	if vs := violations(CheckThrottle(h), "share"); len(vs) == 0 {
		t.Fatal("class a, 30%, got 0 of 10 admissions while it waited, unnoticed")
	}
	h.Calls[4].Class = "a" // 1 of 10: within the slack
	if vs := violations(CheckThrottle(h), "share"); len(vs) > 0 {
		t.Fatalf("1 of 10 for 30%% less a slack of 2: %v", vs)
	}
	// With a's waiter gone at 100 ms, a did not wait: lending is fine.
	h.Calls[4].Class = "b"
	h.Calls[0] = of(admitted(0, 2000*ms), "a", "")
	h.Calls[0].Admitted, h.Calls[0].Ended = false, 100*ms
	if vs := violations(CheckThrottle(h), "share"); len(vs) > 0 {
		t.Fatalf("class b used a's unused share: %v", vs)
	}
	// Calls of no class are class other's: 70% of 10 less 2.
	for i := 2; i < 8; i++ {
		h.Calls[i].Class = "a"
	}
	h.Calls[0].Admitted, h.Calls[0].Ended = true, 2000*ms
	h.Calls[1].Class = ""
	if vs := violations(CheckThrottle(h), "share"); len(vs) == 0 {
		t.Fatal("class other, 70%, got 4 of 10 while it waited, unnoticed")
	}
}

func TestThrottleFairTurns(t *testing.T) {
	// t1 waits from 0; t0 is admitted at 600 and 700 ms, past the bound.
	w := of(admitted(0, 900*ms), "", "t1")
	h := fairHist(w, of(admitted(0, 600*ms), "", "t0"), of(admitted(0, 700*ms), "", "t0"))
	if vs := violations(CheckThrottle(h), "turns"); len(vs) == 0 {
		t.Fatal("t0 admitted twice while t1 had waited the bound, unnoticed")
	}
	// Once within the bound: fine.
	h.Calls[1].Decided = 400 * ms
	if vs := violations(CheckThrottle(h), "turns"); len(vs) > 0 {
		t.Fatalf("t0 admitted once past the bound: %v", vs)
	}
	// Another class's tenant is no turn of t1's.
	h.Calls[1].Decided, h.Calls[1].Class, h.Calls[2].Class = 600*ms, "a", "a"
	if vs := violations(CheckThrottle(h), "turns"); len(vs) > 0 {
		t.Fatalf("tenant t0 of class a: %v", vs)
	}
	// In a class with a share, the credit shifts every tenant of the
	// class alike: twice is a breach there too.
	wa := of(admitted(0, 900*ms), "a", "t1")
	ha := fairHist(wa, of(admitted(0, 600*ms), "a", "t0"), of(admitted(0, 700*ms), "a", "t0"))
	if vs := violations(CheckThrottle(ha), "turns"); len(vs) == 0 {
		t.Fatal("t0 of class a admitted twice while t1 had waited the bound, unnoticed")
	}
	// Calls of unequal cost: a turn lasts its call's fair interval, so a
	// tenant of calls of a third of the interval may take three turns,
	// not four.
	hc := fairHist(of(admitted(0, 900*ms), "", "t1"), of(admitted(0, 600*ms), "", "t0"),
		of(admitted(0, 700*ms), "", "t0"), of(admitted(0, 750*ms), "", "t0"))
	hc.Rules = []ThrottleRule{{Windows: []Window{{Limit: 10, Period: time.Second}}},
		{Cost: "tokens", Windows: []Window{{Limit: 30, Period: time.Second}}}}
	hc.Calls[0].Cost = 9 // 300 ms, against 100 ms for the others
	for i := 1; i < 4; i++ {
		hc.Calls[i].Cost = 1
	}
	if vs := violations(CheckThrottle(hc), "turns"); len(vs) > 0 {
		t.Fatalf("t0 admitted 3 times beside a call of 3 times the interval: %v", vs)
	}
	hc.Calls = append(hc.Calls, of(admitted(0, 800*ms), "", "t0"))
	hc.Calls[4].Cost = 1
	if vs := violations(CheckThrottle(hc), "turns"); len(vs) == 0 {
		t.Fatal("t0 admitted 4 times beside a call of 3 times the interval, unnoticed")
	}
	// A call of t1 admitted at once and charged (ahead of its place in
	// its round, t1's next a round later) allows one more turn; one of
	// another tenant, or uncharged, does not.
	hq := fairHist(w, of(admitted(0, 600*ms), "", "t0"), of(admitted(0, 700*ms), "", "t0"), of(admitted(0, 2*ms), "", "t1"))
	if vs := violations(CheckThrottle(hq), "turns"); len(vs) == 0 {
		t.Fatal("t0 admitted twice while t1 had waited the bound, t1's other call uncharged, unnoticed")
	}
	hq.Calls[3].Charged = true
	if vs := violations(CheckThrottle(hq), "turns"); len(vs) > 0 {
		t.Fatalf("t0 admitted twice after t1's call admitted at once and charged: %v", vs)
	}
	hq.Calls[3].Tenant = "t2"
	if vs := violations(CheckThrottle(hq), "turns"); len(vs) == 0 {
		t.Fatal("t0 admitted twice while t1 had waited the bound, t2 charged, unnoticed")
	}
	// A fault's settling excuses it.
	h.Calls[1].Class, h.Calls[2].Class = "", ""
	h.Faults = []Span{{From: 300 * ms, To: 300 * ms, Why: "outage"}}
	if vs := violations(CheckThrottle(h), "turns"); len(vs) > 0 {
		t.Fatalf("during a fault's settling: %v", vs)
	}
}

func TestThrottleFairStarve(t *testing.T) {
	// A waiter of class a (30%) passed by 5 calls of one flow of class
	// other (70%): ⌈70/30⌉·1 + 1 = 4 at most.
	calls := []CallRecord{of(admitted(0, 2000*ms), "a", "t0")}
	for i := range 5 {
		calls = append(calls, of(admitted(0, time.Duration(600+100*i)*ms), "b", "t0"))
	}
	h := fairHist(calls...)
	if vs := violations(CheckThrottle(h), "starve"); len(vs) == 0 {
		t.Fatal("passed by 5 calls of a flow of 70% against one of 30%, unnoticed")
	}
	h.Calls = h.Calls[:5]
	if vs := violations(CheckThrottle(h), "starve"); len(vs) > 0 {
		t.Fatalf("passed by 4: %v", vs)
	}
	// Its own flow's older calls are no passing: it is not its flow's
	// oldest until they are admitted.
	h.Calls = append(h.Calls, of(admitted(0, 1500*ms), "a", "t0"), of(admitted(0, 1600*ms), "b", "t0"))
	h.Calls[0].Arrived = 10 * ms
	if vs := violations(CheckThrottle(h), "starve"); len(vs) > 0 {
		t.Fatalf("behind its own flow's older call: %v", vs)
	}
}

// A Fair history's idle property: any waiter may be next, so the lane
// must admit someone within Bound while all its waiters have room.
func TestThrottleFairIdle(t *testing.T) {
	h := fairHist(of(admitted(0, 1000*ms), "", "t0"), of(admitted(10*ms, 100*ms), "", "t1"))
	if vs := violations(CheckThrottle(h), "idle"); len(vs) == 0 {
		t.Fatal("900 ms with room and no admission after 100 ms, unnoticed")
	}
	h.Calls[0].Decided, h.Calls[0].Ended = 550*ms, 550*ms
	if vs := violations(CheckThrottle(h), "idle"); len(vs) > 0 {
		t.Fatalf("the younger waiter first, the other within the bound: %v", vs)
	}
}

func TestGenerateThrottleFair(t *testing.T) {
	caps := Caps{Sleep: true, Persist: true, Nodes: 1}
	for seed := uint64(1); seed <= 40; seed++ {
		p := GenerateThrottle(seed, caps)
		if p.Fair() != (seed%2 == 0) {
			t.Fatalf("seed %d: fair %v", seed, p.Fair())
		}
		if !p.Fair() {
			continue
		}
		if q := generateThrottle(seed, caps); len(q.Rules) != len(p.Rules) || len(q.Steps)+2 != len(p.Steps) {
			t.Fatalf("seed %d: the fair scenario is not the seed's with classes and a burst:\n%v\n%v", seed, q, p)
		}
		classes, tenants := map[string]bool{}, map[string]bool{}
		for _, s := range p.Steps {
			for _, c := range s.Calls {
				classes[c.Class], tenants[c.Tenant] = true, true
			}
		}
		if len(classes) < 3 || len(tenants) < 2 || len(p.Shares) != 1 {
			t.Fatalf("seed %d: classes %v, tenants %v, shares %v", seed, classes, tenants, p.Shares)
		}
	}
}

// A tenant's younger waiter waits for its own older ones: the other
// tenants' turns meanwhile are no breach.
func TestThrottleFairTurnsOwnQueue(t *testing.T) {
	h := fairHist(of(admitted(0, 1500*ms), "", "t1"), of(admitted(20*ms, 2500*ms), "", "t1"),
		of(admitted(10*ms, 1000*ms), "", "t0"), of(admitted(30*ms, 2000*ms), "", "t0"), of(admitted(40*ms, 3000*ms), "", "t0"))
	h.End = 4 * time.Second
	if vs := violations(CheckThrottle(h), "turns"); len(vs) > 0 {
		t.Fatalf("alternating tenants: %v", vs)
	}
	h.Calls[3].Decided, h.Calls[4].Decided = 2100*ms, 2200*ms // t0 twice while t1's second, its oldest from 1.5 s, waits
	if vs := violations(CheckThrottle(h), "turns"); len(vs) == 0 {
		t.Fatal("t0 admitted twice while t1's oldest waited, unnoticed")
	}
}
