package engine

import (
	"strconv"
	"sync/atomic"
	"unsafe"

	"github.com/slidelimit/slidelimit/engine/internal/codec"
	"github.com/slidelimit/slidelimit/engine/internal/plan"
)

// taken is what an admitted request took, recorded when it was admitted so
// that finishing it (Finish, FinishAsync) re-plans nothing: its member in each key it was counted in, what
// it counts there, the slots it holds, and which key each check counts in.
// Every copy of the Decision shares it; its state makes Finish idempotent.
// It is immutable but for state, and safe for concurrent use.
type taken struct {
	id     int64
	src    source // fromRedis or fromLocal
	idLen  uint8  // length of the member at the end of text
	at     int64  // the decision time, µs since 1970 (settlement of grained keys)
	text   string // every key, back to back, then the member
	keys   []takenKey
	checks []takenCheck
	extra  []takenExtra  // per key, for distinct keys; nil without them
	state  atomic.Uint32 // done* bits: what was finished already

	// Room for the usual request, so that it costs one allocation.
	inKeys   [3]takenKey
	inChecks [3]takenCheck
	inText   [192]byte // keys of about 170 bytes and a member: a 480-byte object
}

// A taken key keeps its check's index in an int8: a plan.MaxChecks above
// 128 must not compile.
const _ int8 = plan.MaxChecks - 1

// maxIDLen is the longest id in decimal (an int64's).
const maxIDLen = 20

// takenKey is one key a request was counted in.
type takenKey struct {
	end     int32 // end of the key in text
	kind    byte  // kindCount, kindSlot, kindWeighted, kindCal or kindDistinct
	check   int8  // kindCal: the check whose calendar window it counts (< maxChecks)
	suffix  int64 // the member's suffix in the key
	cost    int64 // what the request counts there (a weighted key)
	longest int64 // the key's longest period in µs: how long its entry counts
	grain   int64 // a weighted key's coarsest grain in µs; 0 when exact
	cal     int64 // kindCal: the start of the period it counted in (µs since 1970)
}

// takenCheck is one check of the request.
type takenCheck struct {
	key    int32 // index in keys of its rate key; -1 for a check without one
	priced bool  // its limiter has a cost (Limiter.Cost): it settles
}

// What a request's Finish calls have done (taken.state).
const (
	doneGiveBack = 1 << iota // removed from every key
	doneRelease              // its slots freed
	doneSettle               // its costs settled
)

// member returns the request's member, its id in decimal.
func (t *taken) member() string { return t.text[len(t.text)-int(t.idLen):] }

// key returns key i.
func (t *taken) key(i int) string {
	start := int32(0)
	if i > 0 {
		start = t.keys[i-1].end
	}
	return t.text[start:t.keys[i].end]
}

// take records what c, admitted by src, took; req is its Request.
func (c *call) take(req *Request, src source) *taken {
	p := &c.plan
	t := &taken{id: c.id, src: src, at: c.sec*1e6 + c.usec}
	t.keys, t.checks = t.inKeys[:0], t.inChecks[:0]
	// The member is kept after the keys, in the same allocation: holding
	// a slot and finishing need it as text, and formatting it each time
	// cost an allocation each.
	keys := p.Buf[:p.Ends[len(p.Ends)-1]]
	if len(keys)+maxIDLen <= len(t.inText) {
		n := copy(t.inText[:], keys)
		n = len(strconv.AppendInt(t.inText[:n], t.id, 10))
		t.text = unsafe.String(&t.inText[0], n) // t.inText never changes again
	} else {
		b := strconv.AppendInt(append(make([]byte, 0, len(keys)+maxIDLen), keys...), t.id, 10)
		t.text = unsafe.String(&b[0], len(b)) // b never changes again
	}
	t.idLen = uint8(len(t.text) - len(keys))
	for i := range p.Keys {
		k := takenKey{end: int32(p.Ends[i]), kind: codec.KindCount, suffix: c.suffixOf(i, src), longest: p.Longest(i)}
		switch {
		case p.Slot[i]:
			k.kind = codec.KindSlot
		case p.Weighted[i]:
			k.kind, k.cost = codec.KindWeighted, p.Cost[i]
			for _, w := range p.Wins[p.WinStart[i]:p.WinStart[i+1]] {
				k.grain = max(k.grain, w.Grain)
			}
		}
		t.keys = append(t.keys, k)
	}
	for i := range req.Checks {
		t.checks = append(t.checks, takenCheck{key: p.KeyOf[i], priced: req.Checks[i].Limiter.Cost != ""})
	}
	if len(p.Cals) > 0 {
		t.takeCalendars(p)
	}
	if p.NDistinct > 0 {
		t.takeExtra(p)
	}
	return t
}

// suffixOf returns the suffix of c's member in key i. The local limiter
// uses none; in Redis every key of one script call got the same one, which
// on a cluster may differ between calls (c.suffix is then -1).
func (c *call) suffixOf(i int, src source) int64 {
	switch {
	case src == fromLocal:
		return 0
	case c.suffix >= 0:
		return c.suffix
	}
	for j := range c.pends {
		for _, k := range c.part(j) {
			if int(k) == i {
				return c.psuf[j]
			}
		}
	}
	return -1
}

// stringBytes returns the bytes of s without copying; they must not be
// changed.
func stringBytes(s string) []byte { return unsafe.Slice(unsafe.StringData(s), len(s)) }
