package faults

import (
	"strings"
	"testing"
	"time"
)

const sec = time.Second

// hist builds a history of one subject "s" in one window 3/10s.
type hist struct {
	History
	step int
}

func newHist(fail string) *hist {
	return &hist{History: History{Windows: []Window{{Limit: 3, Period: 10 * sec}}, Fail: fail}}
}

// add appends n decisions of proc at at, each its own step.
func (h *hist) add(n int, proc int, at time.Duration, allowed bool, src Source) {
	for range n {
		h.step++
		h.Decisions = append(h.Decisions, Decision{Step: h.step, At: at, Proc: proc, Subject: "s", Allowed: allowed, Source: src})
	}
}

func (h *hist) loss(at time.Duration) {
	h.step++
	h.Losses = append(h.Losses, Loss{Step: h.step, At: at, Why: "restart empty"})
}

func wantViolations(t *testing.T, h *hist, want int) {
	t.Helper()
	vs := Check(h.History)
	if len(vs) != want {
		t.Fatalf("got %d violations, want %d: %v", len(vs), want, vs)
	}
}

func TestModelRedis(t *testing.T) {
	h := newHist("local")
	h.add(3, 1, 1*sec, true, Redis)
	h.add(1, 2, 5*sec, false, Redis)
	h.add(3, 2, 11*sec, true, Redis) // the first three left at 11 s
	wantViolations(t, h, 0)
	h.add(1, 1, 20*sec, true, Redis) // 4 in (10 s, 20 s]
	wantViolations(t, h, 1)
}

func TestModelGivenBack(t *testing.T) {
	h := newHist("local")
	h.add(4, 1, 1*sec, true, Redis)
	wantViolations(t, h, 1)
	h.Decisions[0].GivenBack = true
	wantViolations(t, h, 0)
}

func TestModelLoss(t *testing.T) {
	h := newHist("local")
	h.add(3, 1, 1*sec, true, Redis)
	h.loss(2 * sec)
	h.add(3, 1, 3*sec, true, Redis)
	wantViolations(t, h, 0)
	h.add(1, 1, 4*sec, true, Redis)
	wantViolations(t, h, 1)
}

// TestModelFullSeen: a full subject this process has seen gets 0 more
// while the entries Redis reported are in the window, then L.
func TestModelFullSeen(t *testing.T) {
	h := newHist("local")
	h.add(3, 1, 1*sec, true, Redis)
	h.add(1, 1, 2*sec, false, Redis) // the anchor: full
	h.add(1, 2, 2*sec, false, Redis) // proc 2 saw it full too
	wantViolations(t, h, 0)
	h.add(1, 1, 5*sec, true, Local)
	wantViolations(t, h, 1)

	h = newHist("local")
	h.add(3, 1, 1*sec, true, Redis)
	h.add(1, 1, 2*sec, false, Redis)
	h.add(3, 1, 11*sec, true, Local) // the entries left: L more
	wantViolations(t, h, 0)
	h.add(1, 1, 12*sec, true, Local)
	wantViolations(t, h, 1)
}

// TestModelPartlyUsed: k of L used gets at most L-k more per process.
func TestModelPartlyUsed(t *testing.T) {
	h := newHist("local")
	h.add(1, 1, 1*sec, true, Redis) // proc 1 saw 1 of 3
	h.add(1, 2, 1*sec, true, Redis) // proc 2 saw 2 of 3
	h.add(1, 3, 1*sec, true, Redis) // proc 3 saw 3 of 3
	h.add(2, 1, 2*sec, true, Local)
	h.add(1, 2, 2*sec, true, Local)
	wantViolations(t, h, 0) // 3 + 2 + 1 + 0
	h.add(1, 3, 2*sec, true, Local)
	wantViolations(t, h, 1)
}

// TestModelUnseen: a process that never asked Redis gets L.
func TestModelUnseen(t *testing.T) {
	h := newHist("local")
	h.add(3, 1, 1*sec, true, Redis)
	h.add(3, 2, 2*sec, true, Local)
	h.add(3, 3, 2*sec, true, Local)
	wantViolations(t, h, 0)
	h.add(1, 3, 3*sec, true, Local)
	wantViolations(t, h, 1)
}

// TestModelLostAnchor: an anchor's entries lost to a restart still count
// against the process that saw them, as the engine's seed does.
func TestModelLostAnchor(t *testing.T) {
	h := newHist("local")
	h.add(3, 1, 1*sec, true, Redis)
	h.loss(2 * sec)
	h.add(3, 2, 3*sec, true, Redis)
	h.add(1, 1, 4*sec, true, Local)
	wantViolations(t, h, 1)
}

func TestModelSources(t *testing.T) {
	for _, c := range []struct {
		fail    string
		allowed bool
		src     Source
		bad     string
	}{
		{"local", true, Cache, "cache"},
		{"closed", true, FailClosed, "fail:closed"},
		{"open", false, FailOpen, "fail:open"},
		{"closed", true, Local, "local under fail:closed"},
		{"local", true, FailOpen, "fail-open under fail:local"},
		{"open", false, FailClosed, "fail-closed under fail:open"},
		{"open", true, FailOpen, ""},
		{"closed", false, FailClosed, ""},
		{"local", false, Cache, ""},
	} {
		h := newHist(c.fail)
		h.add(1, 1, sec, c.allowed, c.src)
		vs := Check(h.History)
		if c.bad == "" && len(vs) != 0 || c.bad != "" && (len(vs) != 1 || !strings.Contains(vs[0].Detail, c.bad)) {
			t.Errorf("%+v: %v", c, vs)
		}
	}
	// Fail-open admissions are not bounded.
	h := newHist("open")
	h.add(10, 1, sec, true, FailOpen)
	wantViolations(t, h, 0)
}

func TestModelHeld(t *testing.T) {
	h := newHist("local")
	h.add(2, 1, 1*sec, true, Redis)
	h.loss(2 * sec)
	h.add(2, 1, 3*sec, true, Redis)
	h.add(1, 1, 3*sec, false, Redis)
	h.add(1, 1, 4*sec, false, FailClosed)
	h.Decisions[3].GivenBack = true
	w := h.Windows[0]
	if n := Held(h.History, "s", w, 5*sec); n != 2 {
		t.Errorf("held %d, want 2 (one admission after the loss, one call that failed)", n)
	}
	h.Decisions[3].Unsure = true
	if n := Held(h.History, "s", w, 5*sec); n != 3 {
		t.Errorf("held %d, want 3", n)
	}
	if n := Held(h.History, "s", w, 14*sec); n != 0 {
		t.Errorf("held %d at 14 s, want 0", n)
	}
}

// TestModelCost: costs count in units, a settlement down counts what it
// kept, one up is a debt outside the bound; the fallback's allowance is in
// units too.
func TestModelCost(t *testing.T) {
	h := newHist("local")
	h.Windows = []Window{{Limit: 10, Period: 10 * sec}}
	h.add(2, 1, sec, true, Redis)
	h.Decisions[0].Cost, h.Decisions[1].Cost = 4, 6
	wantViolations(t, h, 0)
	h.add(1, 1, sec, true, Redis)
	h.Decisions[2].Cost = 3
	wantViolations(t, h, 1)
	h.Decisions[1].Settled, h.Decisions[1].Actual = true, 3 // 4 + 3 + 3
	wantViolations(t, h, 0)
	h.Decisions[0].Settled, h.Decisions[0].Actual = true, 9 // a debt
	wantViolations(t, h, 0)
	// Proc 1 saw 10 of 10 at its last answer: nothing more locally.
	h.add(1, 1, 2*sec, true, Local)
	wantViolations(t, h, 1)
}

// TestModelDistinct: a value counts once while it is in the shortest
// window; the fallback counts requests.
func TestModelDistinct(t *testing.T) {
	h := newHist("local")
	h.Distinct = true
	h.Windows = []Window{{Limit: 2, Period: 10 * sec}, {Limit: 3, Period: 30 * sec}}
	for _, v := range []string{"a", "a", "b", "a", "b"} {
		h.add(1, 1, sec, true, Redis)
		h.Decisions[len(h.Decisions)-1].Value = v
	}
	wantViolations(t, h, 0)
	h.add(1, 1, 2*sec, true, Redis)
	h.Decisions[len(h.Decisions)-1].Value = "c"
	wantViolations(t, h, 1)
	h.Decisions[len(h.Decisions)-1].Value = "a"
	h.Decisions[len(h.Decisions)-1].At = 12 * sec // a counts again: 3 in 30 s
	wantViolations(t, h, 0)
	h.add(1, 1, 12*sec, true, Redis)
	h.Decisions[len(h.Decisions)-1].Value = "c" // a, b, c in 30 s: a counted twice is one value
	wantViolations(t, h, 0)
	h.add(1, 1, 12*sec, true, Redis)
	h.Decisions[len(h.Decisions)-1].Value = "d" // a, c, d in 10 s; a, b, c, d in 30 s
	wantViolations(t, h, 2)

	// Hole 1 of issue 38: a full subject gets 0 more locally.
	h = newHist("local")
	h.Distinct = true
	h.add(3, 1, sec, true, Redis)
	for i, v := range []string{"a", "b", "c"} {
		h.Decisions[i].Value = v
	}
	h.add(1, 1, 2*sec, true, Local)
	wantViolations(t, h, 1)
}

// TestModelSlots: an in-flight window holds at most N slots from admission
// to release; a dead holder's slot stays held; each fallback holds N.
func TestModelSlots(t *testing.T) {
	h := newHist("local")
	h.Windows = []Window{{Limit: 1, Concurrent: true}}
	h.add(1, 1, sec, true, Redis)
	h.add(1, 2, sec, true, Redis)
	wantViolations(t, h, 1)
	h.Decisions[0].Released = 3 // released after the second one: held at it
	wantViolations(t, h, 1)
	h.Decisions[0].Released = 1
	h.Decisions[1].Step = 3
	h.step = 3
	wantViolations(t, h, 0)
	h.add(1, 1, sec, true, Local)
	h.add(1, 2, sec, true, Local)
	wantViolations(t, h, 0) // one each
	h.add(1, 2, sec, true, Local)
	wantViolations(t, h, 1)
}

// TestModelDistinctAgain: a value counted again once older than the
// shortest window is still one value in a longer window (found by a long
// run of TestFaults on Redis, seed 8973027224070157386, where the model
// was wrong).
func TestModelDistinctAgain(t *testing.T) {
	h := newHist("open")
	h.Distinct = true
	h.Windows = []Window{{Limit: 2, Period: sec}, {Limit: 3, Period: 2 * sec}}
	for _, c := range []struct {
		at time.Duration
		v  string
	}{{0, "a"}, {0, "b"}, {1380 * time.Millisecond, "a"}, {1380 * time.Millisecond, "c"}} {
		h.add(1, 1, c.at, true, Redis)
		h.Decisions[len(h.Decisions)-1].Value = c.v
	}
	wantViolations(t, h, 0) // the 2 s window holds a, b, c
	h.add(1, 1, 1500*time.Millisecond, true, Redis)
	h.Decisions[len(h.Decisions)-1].Value = "d" // a, c, d in 1 s; a, b, c, d in 2 s
	wantViolations(t, h, 2)
}

// TestModelConcurrentAnswers: of the answers Redis gave a process in one
// step (concurrent calls), its fallback starts from the highest count,
// whichever is listed last (found by TestFaults, seed 11, where the
// engine kept a held value's answer, 2 of 3, over a new value's, 3 of 3).
func TestModelConcurrentAnswers(t *testing.T) {
	for _, order := range [][]string{{"b", "a"}, {"a", "b"}} {
		h := newHist("local")
		h.Distinct = true
		h.add(2, 1, sec, true, Redis)
		h.Decisions[0].Value, h.Decisions[1].Value = "a", "c"
		h.step++
		for _, v := range order { // a is held: only b counts
			h.Decisions = append(h.Decisions, Decision{Step: h.step, At: 2 * sec, Proc: 1, Subject: "s", Allowed: true, Source: Redis, Value: v})
		}
		wantViolations(t, h, 0)
		h.add(1, 1, 3*sec, true, Local)
		wantViolations(t, h, 1)
	}
	// A denial counts nothing either: the same with counts.
	h := newHist("local")
	h.add(2, 1, sec, true, Redis)
	h.step++
	h.Decisions = append(h.Decisions,
		Decision{Step: h.step, At: 2 * sec, Proc: 1, Subject: "s", Allowed: true, Source: Redis},
		Decision{Step: h.step, At: 2 * sec, Proc: 1, Subject: "s", Allowed: false, Source: Redis})
	h.add(1, 1, 3*sec, true, Local)
	wantViolations(t, h, 1)
}

// TestModelResets checks the Reset property on hand-made histories: a
// Reset below the time until the oldest sure entry leaves, or above the
// period, is a violation; the period itself is not; and a window Redis
// may hold nothing in (a fallback admission only) bounds nothing below.
func TestModelResets(t *testing.T) {
	for _, c := range []struct {
		name   string
		local  bool // the first admission by the fallback
		second time.Duration
		want   int
	}{
		{"exact", false, 7 * sec, 0},
		{"the period, an upper bound", false, 10 * sec, 0},
		{"early", false, 6 * sec, 1},
		{"beyond the period", false, 11 * sec, 1},
		{"nothing sure", true, 0, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			h := newHist("local")
			src := Redis
			if c.local {
				src = Local
			}
			h.add(1, 0, 0, true, src)
			h.Decisions[0].Resets = []time.Duration{10 * sec}
			h.add(1, 0, 3*sec, false, Redis) // denied: 7 s until the first leaves
			h.Decisions[1].Resets = []time.Duration{c.second}
			wantViolations(t, h, c.want)
		})
	}
}
