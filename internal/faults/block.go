package faults

import (
	"cmp"
	"fmt"
	"slices"
	"time"
)

// checkBlocks checks one subject's decisions ds against the group's block
// (docs/rules.md, Blocks): the first denial starts a block of h.Block,
// set in the same atomic call, and every request of the subject is then
// denied without extending it.
//
//   - Redis: a denial of Redis at t when no block it knows runs started
//     one until t+Block; an admission of Redis of a later step before that
//     end is a violation. A loss may take the block key: after a loss that
//     surely did, a denial starts a new block; after one that may have
//     (an eviction, a failover), a denial before the old block's end may be
//     that block's, which ends then, unless an admission since the loss
//     (one of the denial's own step too: see blockOrder) showed it gone.
//   - A process's fallback keeps the blocks it knows: one Redis reported
//     to it (a Redis denial it received) until that block's end, unless
//     Redis admitted a request of it since, at a later time (no block
//     then), or the subject's entries changed since (a give-back or
//     settlement, whose invalidation makes the process forget what Redis
//     said), and those it started itself (a local denial with no block
//     running locally).
func checkBlocks(h History, ds []Decision) (Violation, bool) {
	redisEnd := make([]time.Duration, len(ds)) // Redis's block end as of each Redis decision
	// The block each Redis decision knows of, by number (0: none): a block
	// that ends when another after a loss would is another block.
	blockOf := make([]int, len(ds))
	var end, prevEnd time.Duration
	var id, prevID, ids int
	maybe := false
	prev := -1
	for _, i := range blockOrder(ds) {
		d := ds[i]
		if prev >= 0 && lostBetween(h, prev, d.Step) {
			prevEnd, end = end, 0
			prevID, id = id, 0
			maybe = maybeLostBetween(h, prev, d.Step)
		}
		prev = d.Step
		switch {
		case !d.Allowed && d.At >= end:
			ids++
			end, id = d.At+h.Block, ids
			if maybe && d.At < prevEnd {
				end, id = prevEnd, prevID // perhaps the old block, not evicted
			}
		case d.Allowed && end == 0:
			// Admitted after a loss that may have left the old block:
			// it did not (found by redis seed 3, two evictions).
			maybe = false
		case d.Allowed && d.At < end && startedBefore(ds, blockOf, d, id):
			return Violation{Detail: fmt.Sprintf("step %d, proc %d at %v: admitted by Redis during a block it started, ending at %v",
				d.Step, d.Proc, d.At, end)}, false
		}
		redisEnd[i], blockOf[i] = end, id
	}
	// Each process's fallback.
	known := map[int]time.Duration{} // proc: the end of the block it knows
	since := map[int]int{}           // proc: the step of the Redis denial it knows the block from
	sinceAt := map[int]time.Duration{}
	local := map[int]time.Duration{} // proc: the end of the block its fallback started
	localStep := map[int]int{}       // proc: the step of the local denial that started it
	for i, d := range ds {
		switch {
		case d.Source == Redis && !d.Allowed:
			known[d.Proc], since[d.Proc], sinceAt[d.Proc] = redisEnd[i], d.Step, d.At
		case d.Source == Redis && d.Allowed && since[d.Proc] < d.Step && d.At > sinceAt[d.Proc]:
			// Redis told it of no block (a loss took it): it forgets,
			// when the admission's call was sent after the denial's
			// answer came by the process's clock. One sent at that
			// same instant may have been decided first: the cache keeps
			// the block (erring on denying; found by miniredis seed
			// 4494892442814746794, whose test clock stood still).
			delete(known, d.Proc)
		case d.Source == Local && !d.Allowed && d.At >= local[d.Proc] && d.At >= known[d.Proc]:
			// A denial during a block Redis reported, even one the
			// process may have forgotten, may be that block's: it
			// starts none (found by miniredis seed 1266536796048290354).
			local[d.Proc], localStep[d.Proc] = d.At+h.Block, d.Step
		case d.Source == Local && d.Allowed:
			if e := knownEnd(ds, d, known, since); d.At < e {
				return Violation{Detail: fmt.Sprintf("step %d, proc %d at %v: admitted by its fallback during a block Redis reported to it (step %d), ending at %v",
					d.Step, d.Proc, d.At, since[d.Proc], e)}, false
			}
			if d.At < local[d.Proc] && localStep[d.Proc] < d.Step {
				return Violation{Detail: fmt.Sprintf("step %d, proc %d at %v: admitted by its fallback during a block it started, ending at %v",
					d.Step, d.Proc, d.At, local[d.Proc])}, false
			}
		}
	}
	return Violation{}, true
}

// blockOrder returns the indexes of ds's Redis decisions by step and, in
// a step, admissions first. Redis decides the calls of one step in any
// order, and an admission before a denial is the order that explains
// most: after a loss that may have left the old block, an admission shows
// it gone even when its call ran concurrently with a denial listed before
// it, and that denial then started a new block (found by redis seeds
// 712996795088697415, 2657520790233860435, 6570725154253166567 and
// 8483023598720192505: an
// eviction, then a denial and an admission of one step). An admission
// during a block that a denial of an earlier step started is a violation
// in any order.
func blockOrder(ds []Decision) []int {
	var out []int
	for i, d := range ds {
		if d.Source == Redis {
			out = append(out, i)
		}
	}
	slices.SortStableFunc(out, func(a, b int) int {
		if c := cmp.Compare(ds[a].Step, ds[b].Step); c != 0 {
			return c
		}
		switch {
		case ds[a].Allowed == ds[b].Allowed:
			return 0
		case ds[a].Allowed:
			return -1
		}
		return 1
	})
	return out
}

// startedBefore reports whether Redis denied a request of a step before
// d's during block id (blockOf numbers the blocks of ds's decisions): a
// denial of d's own step ran concurrently with it.
func startedBefore(ds []Decision, blockOf []int, d Decision, id int) bool {
	for i, r := range ds {
		if r.Source == Redis && !r.Allowed && r.Step < d.Step && blockOf[i] == id {
			return true
		}
	}
	return false
}

// knownEnd returns the end of the block d's process knows from Redis, or
// 0 when it knows none or forgot it: a give-back or settlement of the
// subject since the answer (its invalidation reaches every process).
func knownEnd(ds []Decision, d Decision, known map[int]time.Duration, since map[int]int) time.Duration {
	e, ok := known[d.Proc]
	if !ok || since[d.Proc] >= d.Step {
		return 0 // a denial of d's own step ran concurrently with it
	}
	for _, r := range ds {
		if r.Back > since[d.Proc] && r.Back < d.Step || r.Unsure && r.Back > 0 {
			return 0
		}
	}
	return e
}

// maybeLostBetween reports whether every loss between two steps is one that
// may have taken nothing.
func maybeLostBetween(h History, from, to int) bool {
	for _, l := range h.Losses {
		if l.Step > from && l.Step < to && !l.Maybe {
			return false
		}
	}
	return true
}
