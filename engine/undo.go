package engine

import (
	"context"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/slidelimit/slidelimit/internal/logthrottle"
	"github.com/slidelimit/slidelimit/lua"
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

// undo removes a request's member from one key.
type undo struct {
	key    string
	member string
	suffix int64 // the script's suffix, or -1 when unknown: remove all
	until  int64 // local time in µs after which the entry counts no more
	cost   int64 // the request's cost in a weighted key; 0 in a count key
	// A settlement (see Settle) of a weighted key: the change of the
	// request's cost and the mode of give_back.lua ('s' or 'g'); mode 0
	// removes the request.
	delta int64
	mode  byte
	at    int64 // mode 'g': the request's decision time (µs since 1970)
	grain int64 // mode 'g': the key's coarsest grain (µs)
	// mode 'c': a calendar key's counter changes by delta in the period
	// starting at cal (µs since 1970, as text); empty changes nothing.
	cal string
	// mode 'v': a distinct key's value (member) scored at is given back
	// its old score prev (1: removed); an empty member changes nothing.
	prev int64
}

// undoOf returns the undo of member (with suffix, or -1) in key k of p,
// at now (µs).
func undoOf(p *plan, k int, member string, suffix, now int64) undo {
	u := undo{key: strings.Clone(p.keys[k]), member: member, suffix: suffix, until: now + p.longest(k)}
	if p.kw[k] {
		u.cost = p.kcost[k]
	}
	if p.isCal(k) {
		p.calUndo(&u, k)
	}
	if p.isDistinct(k) {
		p.distinctUndo(&u, k)
	}
	return u
}

// members returns the members u removes: the exact one when the suffix is
// known, otherwise the member with every suffix the script may have used.
func (u undo) members() []any {
	if u.suffix >= 0 {
		return []any{memberText(u.member, u.suffix)}
	}
	ms := make([]any, 0, maxSuffix+1)
	for s := range int64(maxSuffix + 1) {
		ms = append(ms, memberText(u.member, s))
	}
	return ms
}

// memberText is the member the script adds for id after suffix collisions.
func memberText(id string, suffix int64) string {
	if suffix == 0 {
		return id
	}
	return id + "." + strconv.FormatInt(suffix, 10)
}

// remove runs us, one ZREM each, in one pipeline within ctx, and returns
// the indices of those that failed, with the first error. It is the one
// way the engine takes an entry out of Redis: rollbacks, undos of failed
// calls and give-backs all come here. Removing a given member is
// idempotent, and members are unique per request, so a removal never takes
// another request's entry. Keys that lost an entry are then published as
// invalidated, for cached denials in every process.
func (e *Engine) remove(ctx context.Context, us []undo) (failed []int, first error) {
	if len(us) == 0 {
		return nil, nil
	}
	if len(us) == 1 && isSlotKey(us[0].key) {
		// A release: one ZREM, and no invalidation, since slot keys make
		// no cached denials.
		cmd := redis.NewIntCmd(ctx, append([]any{"zrem", us[0].key}, us[0].members()...)...)
		if err := e.client.Process(ctx, cmd); err != nil {
			return []int{0}, err
		}
		return nil, nil
	}
	pipe := e.client.Pipeline()
	cmds := make([]*redis.IntCmd, len(us))
	var cals calAdjusts
	for i, u := range us {
		switch u.mode {
		case 'c':
			cmds[i] = cals.add(ctx, pipe, i, e.calAdjustArgs(&u), u.cal == "")
			continue
		case 'v':
			cmds[i] = cals.add(ctx, pipe, i, e.restoreArgs(&u), u.member == "")
			continue
		}
		if u.cost == 0 {
			cmds[i] = pipe.ZRem(ctx, u.key, u.members()...)
			continue
		}
		// A weighted member carries its running total, which the
		// engine does not know: the script finds it (see give_back.lua).
		args := []any{"evalsha", giveBack.Hash(), 1, u.key, -u.cost, "r"}
		switch u.mode {
		case 's':
			args[4], args[5] = u.delta, "s"
		case 'g':
			args[4], args[5] = u.delta, "g"
			args = append(args, u.at, u.grain)
		}
		cmds[i] = redis.NewIntCmd(ctx, append(args, u.members()...)...)
		_ = pipe.Process(ctx, cmds[i])
	}
	// On one server, commands of one pipeline run in order, so the
	// invalidation rides with the removals, after them, at no extra round
	// trip; elsewhere it is sent once they are done.
	var pub *redis.IntCmd
	if e.group == groupAll {
		keys := make([]string, 0, len(us))
		for _, u := range us {
			if (u.mode == 0 || u.mode == 'c' || u.mode == 'v') && !isSlotKey(u.key) {
				keys = append(keys, u.key)
			}
		}
		if pub = e.publishCmd(ctx, invalRemoved, keys...); pub != nil {
			_ = pipe.Process(ctx, pub)
		}
	}
	_, _ = pipe.Exec(ctx) // errors are read per command
	retried := cals.finish(ctx, e, cmds)
	for i, cmd := range cmds {
		if noScript(cmd.Err()) {
			cmds[i] = redis.NewIntCmd(ctx, asEval(cmd.Args(), lua.GiveBack)...)
			_ = e.client.Process(ctx, cmds[i])
			retried = true
		}
	}
	var done []string
	for i, cmd := range cmds {
		if err := cmd.Err(); err != nil {
			failed = append(failed, i)
			if first == nil {
				first = err
			}
		} else if cmd.Val() > 0 && (us[i].mode == 0 || us[i].mode == 'c' || us[i].mode == 'v') && !isSlotKey(us[i].key) {
			// A settlement (mode 's' or 'g') changes weighted keys
			// only, and a release slot keys, which make no cached
			// denials: nothing to announce.
			done = append(done, us[i].key)
		}
	}
	// Cached denials elsewhere may rely on the removed entries.
	if pub == nil || retried || pub.Err() != nil {
		e.publish(ctx, invalRemoved, done...)
	} else {
		e.forgetKnown(done)
	}
	return failed, first
}

// giveBack is the removal script of weighted keys; its SHA1 is computed
// once.
var giveBack = redis.NewScript(lua.GiveBack)

type undoQueue struct {
	n    atomic.Int32 // len(q), read without the lock on the fast path
	mu   sync.Mutex
	q    []undo
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

func (u *undoQueue) push(e *Engine, us ...undo) {
	u.mu.Lock()
	room := maxUndos - len(u.q)
	if len(us) > room {
		e.log.Error("engine: undo queue full; entries of failed calls stay until they leave their windows",
			"dropped", len(us)-max(room, 0))
		us = us[:max(room, 0)]
	}
	u.q = append(u.q, us...)
	u.n.Store(int32(len(u.q)))
	u.mu.Unlock()
}

func (u *undoQueue) take() []undo {
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
	us := make([]undo, len(keys))
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
	var later []undo
	q = slices.DeleteFunc(q, func(u undo) bool {
		if u.until < now {
			return true
		}
		if answers != nil && !answers(u.key) {
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
	var again []undo
	failed, _ := e.remove(ctx, q)
	for _, i := range failed {
		again = append(again, q[i])
	}
	if len(again) > 0 {
		e.undos.push(e, again...)
	}
}

// GiveBack takes the request that d admitted out of every window it was
// counted in, as if it had never been made: a login that succeeded, where
// only failures should count. req must be the Request of the Allow call
// that returned d; its keys are computed again from it.
//
// Admitting then giving back keeps a limit exact where checking after the
// fact would not: while its outcome is unknown, the request holds its place
// in every window, so at most Limit requests whose outcome counts are ever
// in flight or recorded in a window.
//
// A request that holds slots of in-flight windows releases them too (see
// Release).
//
// GiveBack is idempotent and never removes another request's entry: it
// removes the request's own member, a unique id. A Decision that counted
// nothing (a denial, a Peek, a fail-open or fail-closed decision, or an
// Allow without windows) has nothing to give back, and GiveBack returns
// nil. A decision of the local fallback limiter (FromLocal) is given back
// there. When Redis fails, or is considered down after a timeout, the
// removal is queued like the undo of a failed call (see the package
// documentation: best effort, retried before later script calls), and the
// returned error matches ErrBackend; GiveBack thus waits for at most one
// timeout.
// After Close, GiveBack returns ErrClosed. It is safe for concurrent use.
func (e *Engine) GiveBack(ctx context.Context, req Request, d Decision) error {
	return e.giveBack(ctx, &req, &d, false)
}

// giveBack is GiveBack, or with slots Release: the removal of d's member
// from every key of req, or from its slot keys only.
func (e *Engine) giveBack(ctx context.Context, req *Request, d *Decision, slots bool) error {
	r := &d.receipt
	if !d.Allowed || r.id == 0 {
		return nil
	}
	c := getCall()
	defer putCall(c)
	if err := c.plan.build(e.keyer, req); err != nil {
		return err
	}
	if r.suffix < 0 && len(r.suffixes) != len(c.plan.keys) {
		return &RequestError{Check: -1, Window: -1, Reason: "request does not match the decision given back"}
	}
	c.plan.setCalendarAt(d.Time.UnixMicro())
	if slots && c.plan.slots == 0 {
		return nil
	}
	if d.Source == FromLocal {
		e.local.giveBack(&c.plan, r.id, slots)
		return nil
	}
	op := "giveback"
	if slots {
		op = "release"
	}
	member := strconv.FormatInt(r.id, 10)
	now := time.Now().UnixMicro()
	us := make([]undo, 0, len(c.plan.keys))
	for i := range c.plan.keys {
		if !slots || c.plan.ks[i] {
			us = append(us, undoOf(&c.plan, i, member, r.suffixOf(i), now))
		}
	}
	if c.plan.slots > 0 {
		e.unhold(us)
	}
	if e.closed.Load() {
		return ErrClosed
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if e.anyDown(&c.plan) {
		// Redis timed out and has not answered since: queue the removal
		// for the batch that finds it back, instead of making the caller
		// (a handler that has answered) wait for another timeout.
		e.undos.push(e, us...)
		return &BackendError{Op: op, Err: ErrUnavailable}
	}
	ctx, cancel := context.WithTimeout(ctx, e.timeout)
	defer cancel()
	failed, err := e.remove(ctx, us)
	if len(failed) == 0 {
		return nil
	}
	e.warnFailed(op, member, err)
	for _, i := range failed {
		e.undos.push(e, us[i])
	}
	return &BackendError{Op: op, Err: err}
}
