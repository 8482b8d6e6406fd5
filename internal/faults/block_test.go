package faults

import "testing"

func newBlockHist() *hist {
	h := newHist("local")
	h.Block = 30 * sec
	return h
}

func TestModelBlockRedis(t *testing.T) {
	h := newBlockHist()
	h.add(3, 1, 1*sec, true, Redis)
	h.add(1, 2, 2*sec, false, Redis) // starts a block until 32 s
	h.add(1, 2, 20*sec, false, Redis)
	h.add(1, 1, 32*sec, true, Redis) // it ended
	wantViolations(t, h, 0)
	h.add(1, 1, 31*sec, true, Redis) // the windows had room, the block had not ended
	wantViolations(t, h, 1)
}

func TestModelBlockLoss(t *testing.T) {
	h := newBlockHist()
	h.add(3, 1, 1*sec, true, Redis)
	h.add(1, 2, 2*sec, false, Redis)
	h.loss(3 * sec) // the block key is gone with the rest
	h.add(1, 1, 20*sec, true, Redis)
	wantViolations(t, h, 0)
}

func TestModelBlockFallback(t *testing.T) {
	// A block Redis reported holds in the fallback of the process it
	// reported it to, not in another's.
	h := newBlockHist()
	h.add(3, 1, 1*sec, true, Redis)
	h.add(1, 2, 2*sec, false, Redis)
	h.add(1, 1, 15*sec, true, Local) // proc 1 saw no block (nor a full window: 3 left at 11 s)
	wantViolations(t, h, 0)
	h.add(1, 2, 16*sec, true, Local)
	wantViolations(t, h, 1)
	// A give-back since the answer makes proc 2 forget it.
	h.Decisions[0].GivenBack, h.Decisions[0].Back = true, h.step
	h.step++
	h.Decisions[len(h.Decisions)-1].Step = h.step + 1
	wantViolations(t, h, 0)
}

func TestModelBlockOwnFallback(t *testing.T) {
	h := newBlockHist()
	h.add(3, 1, 1*sec, true, Local)
	h.add(1, 1, 2*sec, false, Local) // starts a local block until 32 s
	h.add(1, 1, 12*sec, true, Local)
	wantViolations(t, h, 1)
}

func TestModelBlockAfterLoss(t *testing.T) {
	// Found by cluster seed 3: a block started before a loss and one
	// started after it at the same instant end together, but an admission
	// concurrent with the second's denial is not during a block Redis knew.
	h := newBlockHist()
	h.add(3, 1, 1*sec, true, Redis)
	h.add(1, 2, 1*sec, false, Redis)
	h.loss(1 * sec)
	h.add(2, 1, 1*sec, true, Redis)
	h.step++
	h.Decisions = append(h.Decisions,
		Decision{Step: h.step, At: 1 * sec, Proc: 2, Subject: "s", Source: Redis},
		Decision{Step: h.step, At: 1 * sec, Proc: 1, Subject: "s", Allowed: true, Source: Redis})
	wantViolations(t, h, 0)
}

func TestModelBlockEvicted(t *testing.T) {
	// An eviction may leave a block: a denial after it, before the old
	// block's end, may be that block's. An admission after the eviction
	// shows it is gone: a denial then starts a new block, and an admission
	// concurrent with it is no violation (found by redis seed 3).
	h := newBlockHist()
	h.add(2, 1, 1*sec, true, Redis)
	h.add(1, 2, 1*sec, false, Redis) // a block until 31 s (the window is 3/10s: not full)
	h.step++
	h.Losses = append(h.Losses, Loss{Step: h.step, At: 2 * sec, Why: "eviction", Maybe: true})
	h.add(1, 1, 2*sec, true, Redis)
	h.step++
	h.Decisions = append(h.Decisions,
		Decision{Step: h.step, At: 2 * sec, Proc: 2, Subject: "s", Source: Redis},
		Decision{Step: h.step, At: 2 * sec, Proc: 1, Subject: "s", Allowed: true, Source: Redis})
	wantViolations(t, h, 0)
	h.add(1, 1, 3*sec, true, Redis) // during the new block
	wantViolations(t, h, 1)
}

func TestModelBlockEvictedConcurrent(t *testing.T) {
	// An eviction, then a denial and an admission of one step, the denial
	// listed first: the denial may be the old block's, or Redis may have
	// decided the admission first, which shows the old block gone, and
	// the denial then started a new block.
	for _, tc := range []struct {
		name   string
		before int // admissions before the block
	}{
		{"redis seed 8483023598720192505", 1},
		{"redis seeds 712996795088697415, 2657520790233860435, 6570725154253166567", 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newBlockHist()
			h.add(tc.before, 1, 1*sec, true, Redis)
			h.add(1, 2, 1*sec, false, Redis) // a block until 31 s
			h.step++
			h.Losses = append(h.Losses, Loss{Step: h.step, At: 2 * sec, Why: "eviction", Maybe: true})
			h.step++
			h.Decisions = append(h.Decisions,
				Decision{Step: h.step, At: 2 * sec, Proc: 2, Subject: "s", Source: Redis},
				Decision{Step: h.step, At: 2 * sec, Proc: 1, Subject: "s", Allowed: true, Source: Redis})
			wantViolations(t, h, 0)
			h.add(1, 1, 3*sec, true, Redis) // during the new block
			wantViolations(t, h, 1)
		})
	}
}

func TestModelBlockForgotten(t *testing.T) {
	// Redis lost the block and said so to proc 2 (an admission): its
	// fallback may admit (found by miniredis seed 2220674519971793730).
	h := newBlockHist()
	h.add(3, 1, 1*sec, true, Redis)
	h.add(1, 2, 2*sec, false, Redis)
	h.loss(3 * sec)
	h.add(1, 2, 4*sec, true, Redis)
	h.add(1, 2, 5*sec, true, Local)
	wantViolations(t, h, 0)
}

func TestModelBlockKeptSameInstant(t *testing.T) {
	// Redis admitted a request of proc 2 after a loss, at the instant of
	// the denial that reported the block: the process's cache keeps the
	// block (the admission's call may have been decided first), so its
	// fallback's denial is that block's and starts none (found by
	// miniredis seed 4494892442814746794).
	h := newBlockHist()
	h.add(3, 1, 1*sec, true, Redis)
	h.add(1, 2, 2*sec, false, Redis) // a block until 32 s
	h.loss(2 * sec)
	h.add(1, 2, 2*sec, true, Redis)
	h.add(1, 2, 3*sec, false, Local)
	h.add(1, 2, 32*sec, true, Local) // the block it kept ended
	wantViolations(t, h, 0)
	h.add(1, 2, 31*sec, true, Local) // during the block it kept
	wantViolations(t, h, 1)
}
