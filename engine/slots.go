package engine

import (
	"context"
	"strconv"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/slidelimit/slidelimit/engine/internal/codec"
	"github.com/slidelimit/slidelimit/internal/logthrottle"
	"github.com/slidelimit/slidelimit/lua"
)

// slotRetry is the RetryAfter of a request denied by an in-flight window:
// a slot frees when a running request ends, which may be at any moment, so
// no wait is exact. One second is the shortest wait a Retry-After header
// can say; the lease deadline would be a bound for crashed holders only,
// and far too long for the usual case.
const slotRetry = time.Second

// minLease is the shortest lease WithLease accepts: renewals run every
// lease/3, and a shorter one would renew faster than a round trip.
const minLease = 30 * time.Millisecond

// WithLease sets how long a request holds a slot of an in-flight window
// unless renewed. The default is 30 s, the minimum 30 ms.
//
// The engine renews held slots every lease/3, in one pipelined call per
// server, so a request may run far longer than its lease. A process that
// dies stops renewing, and its slots free at most one lease after their
// last renewal. Slots on a server that is down are not renewed. An outage
// longer than two thirds of a lease loses them, which the first renewal
// after it reports (see WithSlotLost). A shorter lease frees a dead
// process's slots sooner, at the cost of more renewals. Keep the lease
// well above three timeouts (WithTimeout): a renewal that meets a server
// that stopped answering waits up to a timeout, and delays the others.
// Engines sharing a Redis may use different leases.
func WithLease(d time.Duration) Option {
	return func(c *config) error {
		if d < minLease || d > time.Duration(codec.MaxTime/2)*time.Microsecond {
			return &optionError{Option: "WithLease", Reason: "lease below 30ms or beyond the engine's time bound"}
		}
		c.lease = d
		return nil
	}
}

// SlotLost describes a slot of an in-flight window that a renewal found
// gone from Redis while its request still runs. A Reset, a FLUSHALL or a
// failover may have lost it. Or its lease ran out, because the process
// paused for over two thirds of a lease, and an admission removed it.
type SlotLost struct {
	// Key is the slot key, Member the request's member in it.
	Key, Member string
}

// WithSlotLost sets a function called, from the engine's renewal
// goroutine, for every slot a renewal finds gone. The default hook does
// nothing. f must not block for long: the next renewal waits for it.
//
// The request keeps running, because a renewal never ends healthy work.
// But it no longer occupies a slot, so one more request of its subject may
// be admitted meanwhile. The in-flight window may then run one request
// beyond its limit per lost slot, until such requests end. Whatever the
// hook, lost slots are logged (WithLogger) once per renewal period with
// their count, never once per request.
func WithSlotLost(f func(SlotLost)) Option {
	return func(c *config) error {
		if f == nil {
			return &optionError{Option: "WithSlotLost", Reason: "nil function"}
		}
		c.slotLost = f
		return nil
	}
}

// renewScript extends the leases of running requests; renewSrc is its
// text, read once, from which its SHA1 is computed.
var (
	renewSrc    = lua.Renew()
	renewScript = redis.NewScript(renewSrc)
)

// slotRef names one held slot: a slot key and the request's member in it.
type slotRef struct{ key, member string }

// slotHolder is the registry of the slots this engine's admitted requests
// hold, which its renewal goroutine renews every lease/3. The goroutine
// starts with the first slot and stops at Close. It is safe for
// concurrent use.
type slotHolder struct {
	mu      sync.Mutex
	held    map[slotRef]struct{}
	started bool
	done    chan struct{}        // closed when the renewal goroutine has returned
	warn    logthrottle.Throttle // of failed renewals' lines
}

// hold registers the slots that t holds.
func (e *Engine) hold(t *taken) {
	h := &e.slots
	h.mu.Lock()
	defer h.mu.Unlock()
	if e.closed.Load() {
		return
	}
	if h.held == nil {
		h.held = make(map[slotRef]struct{})
	}
	member := t.member()
	for i, k := range t.keys {
		if k.kind == codec.KindSlot {
			// t.key(i) is a view of t.text: the registry keeps t alive
			// while the slot is held, and no more.
			h.held[slotRef{key: t.key(i), member: memberText(member, k.suffix)}] = struct{}{}
		}
	}
	if !h.started {
		h.started = true
		h.warn.Every = warnEvery
		h.done = make(chan struct{})
		go e.renewLoop(h.done)
	}
}

// unhold forgets the slots that t releases in fin.
func (e *Engine) unhold(t *taken, fin []codec.Undo) {
	h := &e.slots
	h.mu.Lock()
	for _, u := range fin {
		if u.Kind == codec.KindSlot {
			delete(h.held, slotRef{key: u.Key, member: memberText(u.Member, u.Suffix)})
		}
	}
	h.mu.Unlock()
}

// holding reports whether ref is still registered.
func (h *slotHolder) holding(ref slotRef) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	_, ok := h.held[ref]
	return ok
}

// renewLoop renews every held slot each lease/3 until Close.
func (e *Engine) renewLoop(done chan struct{}) {
	defer close(done)
	tick := time.NewTicker(time.Duration(e.keyer.Lease) * time.Microsecond / 3)
	defer tick.Stop()
	for {
		select {
		case <-e.stop:
			return
		case <-tick.C:
			e.renew()
		}
	}
}

// renew extends the lease of every held slot: one script call per server
// on a single server, per hash slot on a cluster (one pipeline per master,
// which go-redis sends concurrently), per key on other clients, all in one
// pipeline. Slots found gone are reported (see WithSlotLost); a call that
// fails is logged and its slots are renewed at the next period, which
// comes well before their leases end.
func (e *Engine) renew() {
	groups := e.renewGroups()
	if len(groups) == 0 {
		return
	}
	t, err := e.argTime()
	if err != nil {
		e.log.Error("engine: slot renewal", "err", err)
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), e.timeout)
	defer cancel()
	e.renewed(e.sendRenewals(ctx, groups, t))
}

// renewGroups returns the held slots by script call (group → key →
// members), leaving out those of servers that are down: their probe finds
// out when they answer again, and their slots are renewed at the first
// period after.
func (e *Engine) renewGroups() map[string]map[string][]string {
	h := &e.slots
	h.mu.Lock()
	groups := make(map[string]map[string][]string)
	for ref := range h.held {
		var g string
		switch e.group {
		case groupSlot:
			g = strconv.Itoa(int(slot(ref.key)))
		case groupKey:
			g = ref.key
		}
		if groups[g] == nil {
			groups[g] = make(map[string][]string)
		}
		groups[g][ref.key] = append(groups[g][ref.key], ref.member)
	}
	h.mu.Unlock()
	for g, keys := range groups {
		for key := range keys {
			if e.doms.Of(key).Down.Load() {
				delete(groups, g)
			}
			break // a group's keys share a server
		}
	}
	return groups
}

// renewal is one renewal script call and the slots it renews, in order.
type renewal struct {
	cmd  *redis.IntSliceCmd
	refs []slotRef
}

// sendRenewals renews groups at time t, one script call per group in one
// pipeline; a server without the script (the first renewal, a restart)
// gets its calls again with the source, in one more pipeline.
func (e *Engine) sendRenewals(ctx context.Context, groups map[string]map[string][]string, t int64) []renewal {
	calls := make([]renewal, 0, len(groups))
	pipe := e.client.Pipeline()
	for _, keys := range groups {
		args := []any{"evalsha", renewScript.Hash(), len(keys)}
		var refs []slotRef
		for key := range keys {
			args = append(args, key)
		}
		args = append(args, t, e.keyer.Lease)
		for _, a := range args[3 : 3+len(keys)] {
			key := a.(string)
			ms := keys[key]
			args = append(args, len(ms))
			for _, m := range ms {
				args = append(args, m)
				refs = append(refs, slotRef{key: key, member: m})
			}
		}
		cmd := redis.NewIntSliceCmd(ctx, args...)
		_ = pipe.Process(ctx, cmd)
		calls = append(calls, renewal{cmd: cmd, refs: refs})
	}
	_, _ = pipe.Exec(ctx) // errors are read per command
	var retry redis.Pipeliner
	for i := range calls {
		if noScript(calls[i].cmd.Err()) {
			if retry == nil {
				retry = e.client.Pipeline()
			}
			calls[i].cmd = redis.NewIntSliceCmd(ctx, asEval(calls[i].cmd.Args(), renewSrc)...)
			_ = retry.Process(ctx, calls[i].cmd)
		}
	}
	if retry != nil {
		_, _ = retry.Exec(ctx)
	}
	return calls
}

// renewed reads the renewals' replies: slots found gone are forgotten and
// reported (see WithSlotLost), failures logged at most once per warnEvery.
func (e *Engine) renewed(calls []renewal) {
	h := &e.slots
	var lost []SlotLost
	failed := 0
	var firstErr error
	for _, s := range calls {
		v, err := s.cmd.Result()
		if err == nil && len(v) != len(s.refs) {
			err = codec.NewReplyError("renewal reply of the wrong length", "")
		}
		if err != nil {
			failed += len(s.refs)
			firstErr = err
			continue
		}
		for i, ok := range v {
			// A slot released while its renewal was on its way is gone
			// for a good reason.
			if ok == 0 && h.holding(s.refs[i]) {
				h.mu.Lock()
				delete(h.held, s.refs[i])
				h.mu.Unlock()
				lost = append(lost, SlotLost{Key: s.refs[i].key, Member: s.refs[i].member})
			}
		}
	}
	if failed > 0 {
		if ok, n := h.warn.Allow(time.Now()); ok {
			e.log.Warn("engine: slot renewal failed; retried at the next period", "slots", failed, "err", firstErr, "suppressed", n)
		}
	}
	if len(lost) > 0 {
		e.log.Warn("engine: running requests lost their slots (reset, flushed or expired); they keep running", "slots", len(lost))
		if e.slotLost != nil {
			for _, l := range lost {
				e.slotLost(l)
			}
		}
	}
}
