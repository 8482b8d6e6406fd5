package throttle

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"time"

	"github.com/slidelimit/slidelimit/engine"
)

// idleLanes is how many idle lanes a throttle keeps for their next
// callers. An idle lane is one that no caller of Wait or Allow and no
// unfinished Permit uses: kept, it follows the fleet's messages, so that
// its next caller asks no Redis call to learn the queue and the block
// (fleet.learn). Past idleLanes the least recently used ones are freed.
const idleLanes = 1024

// maxLaneSubject is the longest subject a lane keeps as is; a longer one
// is kept as its hash, "#" and the base64url SHA-256 of its bytes, the
// form the engine stores it in without WithHashedSubjects. No subject
// starts with "#" (lifecycle.SubjectOf), so a hash never equals a subject
// kept as is.
const maxLaneSubject = 128

// laneRef is a lane's place in its throttle's registry; t.mu guards it.
type laneRef struct {
	users      int   // callers in Wait or Allow, and Permits not finished
	idle       bool  // in the idle list
	prev, next *lane // the idle list's neighbours, more and less recently idle
	held       bool  // in t.reg.held
	freed      bool  // out of t.lanes and t.byID
}

// laneRegistry holds the lanes of a throttle that no one uses: the idle
// list, and the lanes past it that an upstream block or this process's
// entry in the fleet's queue still holds. t.mu guards it.
type laneRegistry struct {
	head, tail *lane // the idle list, most recently idle first
	idle       int
	held       map[*lane]struct{} // not used, kept for a block or a fleet entry
	heldNext   time.Time          // when one of held may be freed, at the earliest
	peak       int                // the most lanes t.lanes held since it was last made
}

// laneSubject is the subject s as a lane keeps it: as is, or its hash
// when it is longer than maxLaneSubject, so that a lane keeps no long key
// value alive.
func laneSubject(s string) string {
	if len(s) <= maxLaneSubject {
		return s
	}
	sum := sha256.Sum256([]byte(s))
	return "#" + base64.RawURLEncoding.EncodeToString(sum[:])
}

// laneKey names the lane of req: its subjects (laneSubject), each after
// its length as a uvarint. The encoding is injective whatever bytes the
// subjects hold (up to SHA-256 collisions of long ones): calls with the
// same subjects, and only they, wait in one lane. When windows have
// run-time limits (WithLimitFunc), 0xff and the limits follow: no length
// of a subject up to maxLaneSubject bytes starts with that byte.
func laneKey(req *engine.Request) string {
	var buf [160]byte
	b := buf[:0]
	for i := range req.Checks {
		s := laneSubject(req.Checks[i].Subject)
		b = binary.AppendUvarint(b, uint64(len(s)))
		b = append(b, s...)
	}
	// Run-time limits split lanes: what a lane learns of its windows (full
	// until, the fleet's turn) holds only for the limits it was asked with.
	for i := range req.Checks {
		for _, w := range req.Checks[i].Rule.Windows {
			if w.LimitFunc != "" {
				b = binary.AppendUvarint(append(b, 0xff), uint64(w.Limit))
			}
		}
	}
	return string(b)
}

// laneSubjects returns the subjects key encodes, as views of it.
func laneSubjects(key string) []string {
	var out []string
	for len(key) > 0 && key[0] != 0xff { // 0xff starts the run-time limits
		n, w := binary.Uvarint([]byte(key[:min(len(key), binary.MaxVarintLen64)]))
		if w <= 0 || n > uint64(len(key)-w) {
			break // not a laneKey; none is made so
		}
		out = append(out, key[w:w+int(n)])
		key = key[w+int(n):]
	}
	return out
}

// newLane makes the lane of key. Its id, which names it in Redis keys and
// messages, is the first 128 bits of the SHA-256 of key in hex: the same
// in every process.
func newLane(t *Throttle, key string) *lane {
	sum := sha256.Sum256([]byte(key))
	return &lane{t: t, key: key, subjects: laneSubjects(key), id: hex.EncodeToString(sum[:16]),
		othersMin: none, ready: make(chan struct{})}
}

// lane returns the lane of key (laneKey), made on first use, and counts
// the caller as one of its users until it calls release. A new lane reads
// from Redis whether an upstream block holds it and whether other
// processes wait in it (fleet.learn) before anyone uses it: callers that
// find it reading wait for that, or return ctx's error.
func (t *Throttle) lane(ctx context.Context, key string) (*lane, error) {
	now := time.Now()
	t.mu.Lock()
	ln, ok := t.lanes[key]
	if ok {
		t.reg.unlink(ln)
		if ln.ref.held {
			delete(t.reg.held, ln)
			ln.ref.held = false
		}
	} else {
		ln = newLane(t, key)
		t.lanes[key] = ln
		t.byID[ln.id] = ln
		t.reg.peak = max(t.reg.peak, len(t.lanes))
	}
	ln.ref.users++
	t.sweepHeld(now)
	t.mu.Unlock()
	if !ok {
		t.fleet.learn(ln)
		close(ln.ready)
		return ln, nil
	}
	select {
	case <-ln.ready:
		return ln, nil
	default:
	}
	select {
	case <-ln.ready:
		return ln, nil
	case <-ctx.Done():
		t.release(ln)
		return nil, ctx.Err()
	}
}

// retain counts one more use of ln while it is used (a caller or a
// Permit keeps it), for work that outlives that use; it reports false when
// no one uses ln. Release ends the use.
func (t *Throttle) retain(ln *lane) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if ln.ref.users == 0 || ln.ref.freed {
		return false
	}
	ln.ref.users++
	return true
}

// release ends a use of ln that lane counted. The last user's leaving
// makes ln idle; the least recently used idle lanes past idleLanes are
// freed, or held while a block or a fleet entry needs them.
func (t *Throttle) release(ln *lane) {
	now := time.Now()
	t.mu.Lock()
	defer t.mu.Unlock()
	if ln.ref.users--; ln.ref.users > 0 || ln.ref.freed {
		return
	}
	t.reg.push(ln)
	for t.reg.idle > idleLanes {
		old := t.reg.tail
		t.reg.unlink(old)
		if at, ok := old.pending(now); ok {
			t.hold(old, at)
		} else {
			t.free(old)
		}
	}
	t.sweepHeld(now)
}

// pending reports whether ln must be kept, though no one uses it, and
// until when: an upstream block holds it, or this process still has an
// entry in the fleet's queue (its lease ends it).
func (ln *lane) pending(now time.Time) (time.Time, bool) {
	ln.mu.Lock()
	defer ln.mu.Unlock()
	switch {
	case now.Before(ln.blocked):
		return ln.blocked, true
	case ln.joined || len(ln.q) > 0:
		return now.Add(fleetLease), true
	}
	return time.Time{}, false
}

// hold keeps ln, unused, until at at least; t.mu is held.
func (t *Throttle) hold(ln *lane, at time.Time) {
	if t.reg.held == nil {
		t.reg.held = map[*lane]struct{}{}
	}
	t.reg.held[ln] = struct{}{}
	ln.ref.held = true
	if t.reg.heldNext.IsZero() || at.Before(t.reg.heldNext) {
		t.reg.heldNext = at
	}
}

// sweepHeld frees the held lanes that nothing holds any more, once the
// earliest of their times has come; t.mu is held.
func (t *Throttle) sweepHeld(now time.Time) {
	if len(t.reg.held) == 0 || now.Before(t.reg.heldNext) {
		return
	}
	t.reg.heldNext = time.Time{}
	for ln := range t.reg.held {
		if at, ok := ln.pending(now); ok {
			if t.reg.heldNext.IsZero() || at.Before(t.reg.heldNext) {
				t.reg.heldNext = at
			}
			continue
		}
		delete(t.reg.held, ln)
		ln.ref.held = false
		t.free(ln)
	}
}

// free forgets ln, which no one uses: a later call of its subjects makes
// a new lane, which learns the fleet's state again. The maps are made
// anew once they hold a quarter of their peak, since Go maps never
// shrink. t.mu is held.
func (t *Throttle) free(ln *lane) {
	delete(t.lanes, ln.key)
	if t.byID[ln.id] == ln {
		delete(t.byID, ln.id)
	}
	ln.ref.freed = true
	if n := len(t.lanes); t.reg.peak > 4*idleLanes && n < t.reg.peak/4 {
		lanes, byID := make(map[string]*lane, n), make(map[string]*lane, n)
		for k, l := range t.lanes {
			lanes[k], byID[l.id] = l, l
		}
		t.lanes, t.byID, t.reg.peak = lanes, byID, n
		if len(t.reg.held) > 0 {
			held := make(map[*lane]struct{}, len(t.reg.held))
			for l := range t.reg.held {
				held[l] = struct{}{}
			}
			t.reg.held = held
		}
	}
}

// push puts ln first in the idle list.
func (r *laneRegistry) push(ln *lane) {
	ln.ref.idle, ln.ref.prev, ln.ref.next = true, nil, r.head
	if r.head != nil {
		r.head.ref.prev = ln
	} else {
		r.tail = ln
	}
	r.head = ln
	r.idle++
}

// unlink takes ln out of the idle list, if it is in it.
func (r *laneRegistry) unlink(ln *lane) {
	if !ln.ref.idle {
		return
	}
	if ln.ref.prev != nil {
		ln.ref.prev.ref.next = ln.ref.next
	} else {
		r.head = ln.ref.next
	}
	if ln.ref.next != nil {
		ln.ref.next.ref.prev = ln.ref.prev
	} else {
		r.tail = ln.ref.prev
	}
	ln.ref.idle, ln.ref.prev, ln.ref.next = false, nil, nil
	r.idle--
}
