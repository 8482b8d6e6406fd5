package engine

import (
	"cmp"
	"context"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/slidelimit/slidelimit/engine/internal/codec"
	"github.com/slidelimit/slidelimit/engine/internal/plan"
	"github.com/slidelimit/slidelimit/internal/logthrottle"
)

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
// queue holds at most maxUndos entries, and a command that a hung server
// reads late can run after its undo. The entry then stays until it leaves
// its windows, erring on the side of denying.
const maxUndos = 4096

// undoOf returns the removal of member (with suffix, or -1) from key k of
// p, at now (µs).
func undoOf(p *plan.Plan, k int, member string, suffix, now int64) codec.Undo {
	u := codec.Undo{Key: strings.Clone(p.Keys[k]), Member: member, Suffix: suffix, Until: now + p.Longest(k), Kind: codec.KindCount}
	switch {
	case p.Slot[k]:
		u.Kind = codec.KindSlot
	case p.Weighted[k]:
		u.Kind, u.Cost, u.Delta, u.Mode = codec.KindWeighted, p.Cost[k], -p.Cost[k], 'r'
	case p.IsCal(k):
		calUndo(p, &u, k)
	case p.IsDistinct(k):
		distinctUndo(p, &u, k)
	}
	return u
}

// memberText is the member the script adds for id after suffix collisions.
func memberText(id string, suffix int64) string {
	if suffix == 0 {
		return id
	}
	return id + "." + strconv.FormatInt(suffix, 10)
}

// remove runs us within ctx, as finish ops of the script (one script
// call on a single server, one per undo elsewhere, in one pipeline), and
// returns the indices of those that failed, with the first error. It is
// how the engine takes entries out of Redis outside the batches:
// rollbacks and the undos of failed calls and finishes. Removing a given
// member is idempotent, and members are unique per request, so a removal
// never takes another request's entry. The script publishes the keys that
// lost an entry, for cached denials in every process.
func (e *Engine) remove(ctx context.Context, us []codec.Undo) (failed []int, first error) {
	if len(us) == 0 {
		return nil, nil
	}
	t, err := e.argTime()
	if err != nil {
		t = 0 // finish ops do not read the time
	}
	var fa codec.Args
	var groups [][]int32 // per script call: indices into us
	if e.group == groupAll {
		all := make([]int32, len(us))
		for i := range all {
			all[i] = int32(i)
		}
		groups = [][]int32{all}
	} else {
		for i := range us {
			groups = append(groups, []int32{int32(i)})
		}
	}
	pipe := e.client.Pipeline()
	cmds := make([]*redis.IntSliceCmd, len(groups))
	head, name := e.scriptHead()
	for g, idx := range groups {
		args := []any{head, name, len(idx)}
		for _, i := range idx {
			args = append(args, us[i].Key)
		}
		first := fa.Begin(t)
		for _, i := range idx {
			fa.Finish(us[i].Member, us[i:i+1], []int32{0}, e.chanName)
		}
		cmds[g] = redis.NewIntSliceCmd(ctx, fa.AppendFrom(args, first)...)
		_ = pipe.Process(ctx, cmds[g])
	}
	_, _ = pipe.Exec(ctx) // errors are read per command
	e.retryScripts(ctx, cmds)
	var gone []string
	for g, cmd := range cmds {
		flags, err := cmd.Result()
		if err == nil {
			flags, err = readFinishes(flags, len(groups[g]))
		}
		for j, i := range groups[g] {
			switch {
			case err != nil:
				failed = append(failed, int(i))
				first = cmp.Or(first, err)
			case flags[j] == 1 && us[i].Publishes():
				gone = append(gone, us[i].Key)
			}
		}
	}
	e.forgetKnown(gone)
	return failed, first
}

// readFinishes reads the reply of a script call of n finish ops of one
// key each and returns each op's flag (see readFinish).
func readFinishes(v []int64, n int) ([]int64, error) {
	r := codec.Reader{V: v}
	r.Int(codec.MaxTime / 1e6)
	r.Int(999_999)
	flags := make([]int64, n)
	for i := range flags {
		codec.ReadFinish(&r, flags[i:i+1])
	}
	if err := r.End(); err != nil {
		return nil, err
	}
	return flags, nil
}

type undoQueue struct {
	n    atomic.Int32 // len(q), read without the lock on the fast path
	mu   sync.Mutex
	q    []codec.Undo
	warn logthrottle.Throttle // of failed GiveBacks, Releases and Settles
}

// warnFailed logs that op (a GiveBack, Release or settlement) of member
// failed and was queued, at most once per warnEvery with the number of
// lines held back: an outage must not cost a line per request.
func (e *Engine) warnFailed(op, member string, err error) {
	if ok, n := e.undos.warn.Allow(time.Now()); ok {
		e.log.Warn("engine: "+op+" failed; retried before the next script call", "member", member, "err", err, "suppressed", n)
	}
}

func (u *undoQueue) push(e *Engine, us ...codec.Undo) {
	var now int64
	for i := range us {
		if us[i].Until == 0 {
			now = time.Now().UnixMicro()
			break
		}
	}
	u.mu.Lock()
	room := maxUndos - len(u.q)
	if len(us) > room {
		e.log.Error("engine: undo queue full; entries of failed calls stay until they leave their windows",
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

func (u *undoQueue) take() []codec.Undo {
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

// queueUndo queues the undo of c's member in the keys listed in keys
// (indices into c.plan.keys), with the given suffix or -1.
func (e *Engine) queueUndo(c *call, keys []int32, suffix int64) {
	if c.mode != opAllow || len(keys) == 0 {
		return
	}
	m := string(c.member)
	now := time.Now().UnixMicro()
	us := make([]codec.Undo, len(keys))
	for i, k := range keys {
		us[i] = undoOf(&c.plan, int(k), m, suffix, now)
	}
	e.undos.push(e, us...)
}

// runUndos runs, within ctx, the queued undos of the keys for which
// answers reports true (nil: every key), and requeues the others and those
// that failed, while their entries may still count.
func (e *Engine) runUndos(ctx context.Context, answers func(key string) bool) {
	q := e.undos.take()
	if len(q) == 0 {
		return
	}
	now := time.Now().UnixMicro()
	var later []codec.Undo
	q = slices.DeleteFunc(q, func(u codec.Undo) bool {
		if u.Until < now {
			return true
		}
		if answers != nil && !answers(u.Key) {
			later = append(later, u)
			return true
		}
		return false
	})
	if len(later) > 0 {
		e.undos.push(e, later...)
	}
	if len(q) == 0 {
		return
	}
	var again []codec.Undo
	failed, _ := e.remove(ctx, q)
	for _, i := range failed {
		again = append(again, q[i])
	}
	if len(again) > 0 {
		e.undos.push(e, again...)
	}
}
