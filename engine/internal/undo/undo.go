// Package undo queues the removals of entries that failed script calls may
// have counted, and of finishes that failed, until a server runs them.
//
// A script call that fails (a timeout, a lost connection, a reply the
// engine cannot read) may have counted its requests anyway: Redis may have
// run the script, or will when it reads the command. (go-redis may even
// report every command of a server's pipeline as failed when the context
// expires during its retries, including calls that succeeded.) Such requests
// are decided by their fail mode, and must not stay counted in Redis, so
// the engine queues an undo (ZREM of the member, with every suffix the
// script may have added) for every key of a failed script call, and for
// every rollback that failed. A later batch whose script calls succeed
// runs the queued undos of the servers that just answered it, in what is
// left of its time budget, before it wakes its callers. The failed call
// itself waits no longer, and a server that does not answer delays no
// other server's decisions.
//
// It is best effort: a failed undo is retried by later batches until its
// entry has left the key's longest window (then it no longer counts), the
// queue holds at most Max entries, and a command that a hung server reads
// late can run after its undo. The entry then stays until it leaves its
// windows, erring on the side of denying.
package undo

import (
	"context"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/slidelimit/slidelimit/engine/internal/codec"
	"github.com/slidelimit/slidelimit/engine/internal/plan"
	"github.com/slidelimit/slidelimit/internal/logevery"
)

// Max is the most undos a Queue holds.
const Max = 4096

// Of returns the removal of member (with suffix, or -1) from key k of p,
// at now (µs).
func Of(p *plan.Plan, k int, member string, suffix, now int64) codec.Undo {
	u := codec.Undo{Key: strings.Clone(p.Keys[k]), Member: member, Suffix: suffix, Until: now + p.Longest(k), Kind: codec.KindCount}
	switch {
	case p.Slot[k]:
		u.Kind = codec.KindSlot
	case p.Weighted[k]:
		u.Kind, u.Cost, u.Delta, u.Mode = codec.KindWeighted, p.Cost[k], -p.Cost[k], 'r'
	case p.IsCal(k):
		// The adjustment of the counter by -cost in the period the script
		// counted in; a key whose period is unknown (the call failed: it
		// may not have counted) gets none (cal 0), erring on the side of
		// denying.
		u.Kind, u.Delta, u.Cal = codec.KindCal, -p.Cost[k], p.Cals[k].Start
	case p.IsDistinct(k):
		// The restore of its value: nothing (prev 0) when the op did not
		// count the value anew or its reply was not read (a failed call:
		// the value stays counted, erring on the side of denying).
		u.Kind = codec.KindDistinct
		if k < len(p.DistinctPrev) && p.DistinctPrev[k] > 0 {
			u.Value, u.At, u.Prev = p.Distinct[k], p.DistinctAt[k], p.DistinctPrev[k]
		}
	}
	return u
}

// A Queue holds undos until a server runs them. It is safe for concurrent
// use once Init has run.
type Queue struct {
	n      atomic.Int32 // len(q), read without the lock on the fast path
	mu     sync.Mutex
	q      []codec.Undo
	log    *slog.Logger
	warn   logevery.Gate // of failed GiveBacks, Releases and Settles
	remove Remove
}

// Init sets the logger of u, the least time between two of its lines
// about failed finishes, and how Run removes entries.
func (u *Queue) Init(log *slog.Logger, every time.Duration, remove Remove) {
	u.log, u.warn.Every, u.remove = log, every, remove
}

// Len returns how many undos are queued.
func (u *Queue) Len() int { return int(u.n.Load()) }

// LogFailed logs msg about member's failed finish, at most once per the
// Init period with the number of lines held back: an outage must not cost
// a line per request.
func (u *Queue) LogFailed(msg, member string, err error) {
	if ok, n := u.warn.Allow(time.Now()); ok {
		u.log.Warn(msg, "member", member, "err", err, "suppressed", n)
	}
}

// Push queues us, dropping what does not fit. An undo without Until (a
// finish's) is kept for its Longest from now.
func (u *Queue) Push(us ...codec.Undo) {
	var now int64
	for i := range us {
		if us[i].Until == 0 {
			now = time.Now().UnixMicro()
			break
		}
	}
	u.mu.Lock()
	room := Max - len(u.q)
	if len(us) > room {
		u.log.Error("engine: undo queue full; entries of failed calls stay until they leave their windows",
			"dropped", len(us)-max(room, 0))
		us = us[:max(room, 0)]
	}
	start := len(u.q)
	u.q = append(u.q, us...)
	for i := range u.q[start:] {
		if q := &u.q[start+i]; q.Until == 0 {
			// A finish's: from now, later than the finish, so that the
			// undo is kept longer, never dropped while its entry counts.
			q.Until = now + q.Longest
		}
	}
	u.n.Store(int32(len(u.q)))
	u.mu.Unlock()
}

// Take empties the queue and returns what it held.
func (u *Queue) Take() []codec.Undo {
	if u.n.Load() == 0 {
		return nil
	}
	u.mu.Lock()
	q := u.q
	u.q = nil
	u.n.Store(0)
	u.mu.Unlock()
	return q
}

// Remove runs us within ctx and returns the indices of those that failed.
type Remove func(ctx context.Context, us []codec.Undo) (failed []int, first error)

// Run runs, within ctx, the queued undos of the keys for which answers
// reports true (nil: every key), and requeues the others and those that
// failed, while their entries may still count.
func (u *Queue) Run(ctx context.Context, answers func(key string) bool) {
	q := u.Take()
	if len(q) == 0 {
		return
	}
	now := time.Now().UnixMicro()
	var later []codec.Undo
	q = slices.DeleteFunc(q, func(x codec.Undo) bool {
		if x.Until < now {
			return true
		}
		if answers != nil && !answers(x.Key) {
			later = append(later, x)
			return true
		}
		return false
	})
	if len(later) > 0 {
		u.Push(later...)
	}
	if len(q) == 0 {
		return
	}
	var again []codec.Undo
	failed, _ := u.remove(ctx, q)
	for _, i := range failed {
		again = append(again, q[i])
	}
	if len(again) > 0 {
		u.Push(again...)
	}
}
