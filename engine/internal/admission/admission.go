// Package admission records what an admitted request took, when it was
// admitted, so that finishing it re-plans nothing: its member in each key
// it was counted in, what it counts there, the slots it holds, and which
// key each check counts in.
package admission

import (
	"strconv"
	"sync/atomic"
	"unsafe"

	"github.com/slidelimit/slidelimit/engine/internal/codec"
	"github.com/slidelimit/slidelimit/engine/internal/plan"
)

// A Record is what one admitted request took. Every copy of its Decision
// shares it; its state makes a finish idempotent. It is immutable but for
// that state once New returns, and safe for concurrent use.
type Record struct {
	ID     int64
	At     int64 // the decision time, µs since 1970 (settlement of grained keys)
	Keys   []Key
	Checks []Check
	text   string        // every key, back to back, then the member
	extra  []extra       // per key, for distinct keys; nil without them
	state  atomic.Uint32 // Done* bits: what was finished already
	idLen  uint8         // length of the member at the end of text
	Local  bool          // decided by the local fallback, not by Redis

	// Room for the usual request, so that it costs one allocation.
	inKeys   [3]Key
	inChecks [3]Check
	inText   [192]byte // keys of about 170 bytes and a member: a 480-byte object
}

// A Key keeps its check's index in an int8: a plan.MaxChecks above 128
// must not compile.
const _ int8 = plan.MaxChecks - 1

// maxIDLen is the longest id in decimal (an int64's).
const maxIDLen = 20

// Key is one key a request was counted in.
type Key struct {
	End     int32 // end of the key in the record's text
	Kind    byte  // codec.KindCount, KindSlot, KindWeighted, KindCal or KindDistinct
	Check   int8  // KindCal: the check whose calendar window it counts
	Suffix  int64 // the member's suffix in the key
	Cost    int64 // what the request counts there (a weighted key)
	Longest int64 // the key's longest period in µs: how long its entry counts
	Grain   int64 // a weighted key's coarsest grain in µs; 0 when exact
	Cal     int64 // KindCal: the start of the period it counted in (µs since 1970)
}

// Check is one check of the request.
type Check struct {
	Key    int32 // index in Keys of its rate key; -1 for a check without one
	Priced bool  // its rule has a cost (Rule.Cost): it settles
}

// extra is what a finish needs of a distinct key, beside its Key.
type extra struct {
	at    int64  // the time the value counted anew
	prev  int64  // what a restore gives back (0: nothing)
	value string // the value's member
}

// What a request's finishes have done (see Claim).
const (
	DoneGiveBack = 1 << iota // removed from every key
	DoneRelease              // its slots freed
	DoneSettle               // its costs settled
)

// New records what request id took in the keys of p, admitted at at
// (µs since 1970), locally or by Redis; suffix returns the member's
// suffix in key i. The caller appends the request's Checks.
func New(p *plan.Plan, id int64, local bool, at int64, suffix func(i int) int64) *Record {
	r := &Record{ID: id, Local: local, At: at}
	r.Keys, r.Checks = r.inKeys[:0], r.inChecks[:0]
	// The member is kept after the keys, in the same allocation: holding
	// a slot and finishing need it as text, and formatting it each time
	// cost an allocation each.
	keys := p.Buf[:p.Ends[len(p.Ends)-1]]
	if len(keys)+maxIDLen <= len(r.inText) {
		n := copy(r.inText[:], keys)
		n = len(strconv.AppendInt(r.inText[:n], id, 10))
		r.text = unsafe.String(&r.inText[0], n) // r.inText never changes again
	} else {
		b := strconv.AppendInt(append(make([]byte, 0, len(keys)+maxIDLen), keys...), id, 10)
		r.text = unsafe.String(&b[0], len(b)) // b never changes again
	}
	r.idLen = uint8(len(r.text) - len(keys))
	for i := range p.Keys {
		k := Key{End: int32(p.Ends[i]), Kind: codec.KindCount, Suffix: suffix(i), Longest: p.Longest(i)}
		switch {
		case p.Slot[i]:
			k.Kind = codec.KindSlot
		case p.Weighted[i]:
			k.Kind, k.Cost = codec.KindWeighted, p.Cost[i]
			for _, w := range p.Wins[p.WinStart[i]:p.WinStart[i+1]] {
				k.Grain = max(k.Grain, w.Grain)
			}
		}
		r.Keys = append(r.Keys, k)
	}
	// Calendar keys fit in Key: no allocation.
	for _, w := range p.CalWindows {
		k := &r.Keys[w.Key]
		k.Kind, k.Cost, k.Check = codec.KindCal, p.Cost[w.Key], int8(w.Check)
		k.Cal = p.CalStartAt(int(w.Key), r.At)
	}
	if p.NDistinct > 0 {
		r.takeDistinct(p)
	}
	return r
}

// takeDistinct records the distinct keys of p.
func (r *Record) takeDistinct(p *plan.Plan) {
	r.extra = make([]extra, len(r.Keys))
	for k := range r.Keys {
		if p.IsDistinct(k) {
			r.Keys[k].Kind = codec.KindDistinct
			x := &r.extra[k]
			x.value = p.Distinct[k]
			if k < len(p.DistinctPrev) {
				x.at, x.prev = p.DistinctAt[k], p.DistinctPrev[k]
			}
		}
	}
}

// Member returns the request's member, its id in decimal.
func (r *Record) Member() string { return r.text[len(r.text)-int(r.idLen):] }

// Key returns key i.
func (r *Record) Key(i int) string {
	start := int32(0)
	if i > 0 {
		start = r.Keys[i-1].End
	}
	return r.text[start:r.Keys[i].End]
}

// Claim marks want (Done* bits) done and returns what was done before.
func (r *Record) Claim(want uint32) uint32 {
	for {
		old := r.state.Load()
		if r.state.CompareAndSwap(old, old|want) {
			return old
		}
	}
}

// Finish claims want (Done* bits) and appends to fin the work not done
// yet, one undo per key: giveBack removes the request, deltas (per key,
// nil for none) settle its costs. An undo's Until is left to the undo
// queue: most finishes are never queued.
func (r *Record) Finish(fin []codec.Undo, want uint32, giveBack bool, deltas []int64) []codec.Undo {
	before := r.Claim(want)
	member := r.Member()
	for i := range r.Keys {
		k := &r.Keys[i]
		u := codec.Undo{Key: r.Key(i), Member: member, Suffix: k.Suffix, Longest: k.Longest, Kind: k.Kind}
		switch {
		case want&DoneGiveBack != 0 && before&DoneGiveBack == 0:
			if k.Kind == codec.KindSlot && before&DoneRelease != 0 {
				continue
			}
			if k.Kind == codec.KindWeighted {
				u.Cost, u.Delta, u.Mode, u.At = k.Cost, -k.Cost, 'r', r.At
			}
			if k.Kind == codec.KindCal && before&DoneSettle != 0 {
				continue // a settled request is not given back, as in weighted keys
			}
			if k.Kind == codec.KindDistinct && !r.Local {
				// A give-back leaves the value counted (docs/limits.md):
				// a request admitted since without counting it anew
				// shares it, and a restore would leave that request's
				// value uncounted. Only a rollback restores it.
				continue
			}
			if (k.Kind == codec.KindCal || k.Kind == codec.KindDistinct) && !r.extraUndo(i, &u, -k.Cost) {
				continue
			}
		case k.Kind == codec.KindSlot && want&DoneRelease != 0 && before&(DoneRelease|DoneGiveBack) == 0:
		case k.Kind == codec.KindWeighted && deltas != nil && deltas[i] != 0 && before&(DoneSettle|DoneGiveBack) == 0 && !giveBack:
			u.Cost, u.Delta, u.Mode, u.At = k.Cost, deltas[i], 's', r.At
			if k.Grain > 0 {
				u.Mode, u.Grain = 'g', k.Grain
			}
		case k.Kind == codec.KindCal && deltas != nil && deltas[i] != 0 && before&(DoneSettle|DoneGiveBack) == 0 && !giveBack:
			r.extraUndo(i, &u, deltas[i])
		default:
			continue
		}
		fin = append(fin, u)
	}
	return fin
}

// extraUndo makes u the finish of calendar or distinct key i: a calendar
// key's counter changes by delta in the request's period; a distinct
// key's value is restored (delta unused). It reports false when there is
// nothing to do.
func (r *Record) extraUndo(i int, u *codec.Undo, delta int64) bool {
	if u.Kind == codec.KindCal {
		u.Cal, u.Delta, u.Mode = r.Keys[i].Cal, delta, 's'
		if delta < 0 && delta == -r.Keys[i].Cost {
			u.Mode = 'r' // the local fallback removes the entry
		}
		return true
	}
	x := &r.extra[i]
	u.Value, u.At, u.Prev = x.value, x.at, x.prev
	return x.prev > 0 || r.Local // the fallback removes the request's entry
}

// A CostError says why actual costs cannot settle a request.
type CostError struct {
	Check  int // the offending check, or -1 for the request as a whole
	Reason string
}

func (e *CostError) Error() string { return e.Reason }

// Deltas returns in buf, per key, the change of its cost that actual
// (per check) asks for, and whether any key changes.
func (r *Record) Deltas(actual, buf []int64) (d []int64, changes bool, err error) {
	d = buf[:0]
	if len(actual) != len(r.Checks) {
		return d, false, &CostError{Check: -1, Reason: "Finish needs one actual cost per check, got " +
			strconv.Itoa(len(actual)) + " for " + strconv.Itoa(len(r.Checks))}
	}
	for range r.Keys {
		d = append(d, 0)
	}
	// Indexed by key: every key holds one of the request's windows at
	// least, so there are at most plan.MaxWindows. (A check has at most a
	// rate and a slot key, but calendar keys come between them.)
	var set [plan.MaxWindows]bool
	for i, a := range actual {
		k := r.Checks[i].Key
		if a < 0 || k < 0 {
			continue
		}
		delta := a - r.Keys[k].Cost
		if r.Keys[k].Kind != codec.KindWeighted {
			delta = a - 1
		}
		if err := r.settles(i, delta, d[k], set[k]); err != nil {
			return d, false, err
		}
		d[k], set[k] = delta, true
	}
	for k := range r.Keys {
		// A calendar key changes with its check, as the rate keys do.
		if r.Keys[k].Kind != codec.KindCal {
			continue
		}
		c := int(r.Keys[k].Check)
		a := actual[c]
		if a < 0 {
			continue
		}
		delta := a - r.Keys[k].Cost
		if err := r.settles(c, delta, d[k], d[k] != 0); err != nil {
			return d, false, err
		}
		d[k] = delta
	}
	for _, x := range d {
		if x != 0 {
			return d, true, nil
		}
	}
	return d, false, nil
}

// settles checks that check i may change a key by delta, which has
// another change (prev) already when set.
func (r *Record) settles(i int, delta, prev int64, set bool) error {
	switch {
	case delta != 0 && !r.Checks[i].Priced:
		return &CostError{Check: i, Reason: "only a limiter with a cost settles: this one counts requests"}
	case set && prev != delta:
		return &CostError{Check: i, Reason: "checks sharing a key (same scope, limiter and subject) settle to different costs"}
	}
	return nil
}
