package engine

import (
	"strconv"
	"time"

	"github.com/slidelimit/slidelimit/engine/internal/admission"
	"github.com/slidelimit/slidelimit/engine/internal/codec"
	"github.com/slidelimit/slidelimit/engine/internal/slots"
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

// newSlots returns the registry of e's held slots.
func (e *Engine) newSlots(lost func(SlotLost)) *slots.Holder {
	cfg := slots.Config{
		Client: e.client, Log: e.log, Lease: e.keyer.Lease, Timeout: e.timeout, LogEvery: warnEvery,
		Group: e.renewalGroup, Down: func(key string) bool { return e.doms.Of(key).Down.Load() },
		Time: e.argTime, Stop: e.stop, Closed: e.closed.Load,
	}
	if lost != nil {
		cfg.Lost = func(r slots.Ref) { lost(SlotLost(r)) }
	}
	return slots.New(cfg)
}

// renewalGroup returns the renewal script call of a slot key: one per
// server on a single server, per hash slot on a cluster, per key otherwise.
func (e *Engine) renewalGroup(key string) string {
	switch e.group {
	case groupSlot:
		return strconv.Itoa(int(slot(key)))
	case groupKey:
		return key
	}
	return ""
}

// hold registers the slots that t holds.
func (e *Engine) hold(t *admission.Record) {
	member := t.Member()
	for i, k := range t.Keys {
		if k.Kind == codec.KindSlot {
			// t.Key(i) is a view of the record: the registry keeps t alive
			// while the slot is held, and no more.
			e.slots.Hold(slots.Ref{Key: t.Key(i), Member: memberText(member, k.Suffix)})
		}
	}
}

// unhold forgets the slots that t releases in fin.
func (e *Engine) unhold(t *admission.Record, fin []codec.Undo) {
	for _, u := range fin {
		if u.Kind == codec.KindSlot {
			e.slots.Release(slots.Ref{Key: u.Key, Member: memberText(u.Member, u.Suffix)})
		}
	}
}
