package codec

import (
	"strconv"
	"time"

	"github.com/slidelimit/slidelimit/engine/internal/plan"
	"github.com/slidelimit/slidelimit/internal/rulelimits"
	"github.com/slidelimit/slidelimit/internal/ruletime"
	"github.com/slidelimit/slidelimit/internal/scriptconst"
)

// ReplyError reports a script reply the engine does not understand, which
// means the script and the engine disagree about the wire format (or the
// server is not Redis). It is wrapped in a backendError.
type ReplyError struct {
	// Reason says what was wrong.
	Reason string
	// Reply holds the start of the reply, for diagnosis.
	Reply string
}

// Error returns the reason and the start of the reply.
func (e *ReplyError) Error() string {
	return "engine: unexpected reply: " + e.Reason + " in " + strconv.Quote(e.Reply)
}

// NewReplyError returns the ReplyError of reason in reply, which it
// shortens to 64 bytes.
func NewReplyError(reason, reply string) *ReplyError {
	if len(reply) > 64 {
		reply = reply[:64] + "..."
	}
	return &ReplyError{Reason: reason, Reply: reply}
}

// ResetUnread is the reset ReadOp gives a window whose oldest entry the
// script did not read: the last window of a count key with more room than
// another window of its key, in an op that was not denied (see unread in
// lua/multi_window.lua). Its reset is then only known to be at most the
// window's period.
const ResetUnread = -1

// ReadOp reads the result of an allow or peek op of p over keys, decided
// at t (µs), and returns its status and suffix. Per window j of p, res
// gets used, reset (ResetUnread when not read) and wait at 3j; per key,
// bleft gets its block's time left (µs) when p has blocks.
func ReadOp(r *Reader, p *plan.Plan, res, bleft []int64, keys []int32, t int64) (status, suffix int64) {
	code := r.Int(StatusCollision + 4*MaxSuffix)
	status, suffix = code%4, code/4
	if status > StatusCollision {
		r.Fail("bad status")
	}
	for _, k := range keys {
		if p.Slot[k] {
			// A slot key replies its live slots only.
			j := p.WinStart[k]
			res[3*j], res[3*j+1], res[3*j+2] = r.Int(plan.MaxCountLimit), 0, 0
			continue
		}
		if p.IsCal(int(k)) {
			readCal(r, p, res, k, t)
			if p.BlockOf(int(k)) > 0 {
				BlockedFor(p, res, bleft, int(k), r.Int(int64(rulelimits.MaxPeriod/time.Microsecond)))
			}
			continue
		}
		if p.IsDistinct(int(k)) {
			readHeld(r, p, k, t)
		}
		cost := p.Cost[k]
		for j := p.WinStart[k]; j < p.WinStart[k+1]; j++ {
			w := p.Wins[j]
			used := r.Int(scriptconst.MaxTotal)
			var reset, wait int64
			if used > 0 {
				reset = ResetUnread
				if used+cost > w.Limit || !r.Unread() {
					reset = r.Score(t, w.Period)
				}
				if used+cost > w.Limit {
					wait = r.Score(t, w.Period)
				}
			}
			res[3*j], res[3*j+1], res[3*j+2] = used, reset, wait
		}
		if p.HasUnstable(int(k)) {
			p.ShareWait(int(k), r.IntIn(-1-scriptconst.MaxTotal, int64(rulelimits.MaxPeriod/time.Microsecond)))
		}
		if p.BlockOf(int(k)) > 0 {
			BlockedFor(p, res, bleft, int(k), r.Int(int64(rulelimits.MaxPeriod/time.Microsecond)))
		}
	}
	return status, suffix
}

// BlockedFor records in bleft that key k of p is blocked for left µs more
// (none when left is 0): every window of the key then waits at least that
// long in res.
func BlockedFor(p *plan.Plan, res, bleft []int64, k int, left int64) {
	bleft[k] = left
	if left == 0 {
		return
	}
	for j := p.WinStart[k]; j < p.WinStart[k+1]; j++ {
		res[3*j+2] = max(res[3*j+2], left)
	}
}

// ReadFinish reads a finish op's code and its per-key flags into flags
// (0: unchanged, 1: changed, 2: refused, see lua/multi_window.lua).
func ReadFinish(r *Reader, flags []int64) {
	if r.Int(1) != 1 && r.Err == nil {
		r.Fail("bad finish code")
	}
	for i := range flags {
		flags[i] = r.Int(2)
	}
}

// Reader reads a script reply. The first problem sticks in Err; later reads
// return 0.
type Reader struct {
	V   []int64
	i   int
	Err *ReplyError
}

// Fail records reason at the current position, unless a problem came
// first, and returns 0.
func (r *Reader) Fail(reason string) int64 {
	if r.Err == nil {
		r.Err = NewReplyError(reason+" at "+strconv.Itoa(r.i), r.text())
	}
	return 0
}

// text returns the start of the reply, for errors.
func (r *Reader) text() string {
	var b []byte
	for i, v := range r.V {
		if i > 0 {
			b = append(b, ' ')
		}
		if len(b) > 64 {
			break
		}
		b = strconv.AppendInt(b, v, 10)
	}
	return string(b)
}

// Int reads the next integer, which must be in 0..max.
func (r *Reader) Int(max int64) int64 {
	if r.Err != nil {
		return 0
	}
	if r.i >= len(r.V) {
		return r.Fail("missing number")
	}
	v := r.V[r.i]
	if v < 0 || v > max {
		return r.Fail("number out of range")
	}
	r.i++
	return v
}

// IntIn reads the next number, which must lie in [lo, hi].
func (r *Reader) IntIn(lo, hi int64) int64 {
	if r.Err != nil {
		return 0
	}
	if r.i >= len(r.V) {
		return r.Fail("missing number")
	}
	v := r.V[r.i]
	if v < lo || v > hi {
		return r.Fail("number out of range")
	}
	r.i++
	return v
}

// End checks that the whole reply was read.
func (r *Reader) End() *ReplyError {
	if r.Err == nil && r.i != len(r.V) {
		r.Fail("trailing data")
	}
	return r.Err
}

// Unread reads the score of an entry the script did not read, 0, if that
// is what comes next, and reports whether it was.
func (r *Reader) Unread() bool {
	if r.Err != nil || r.i >= len(r.V) || r.V[r.i] != 0 {
		return false
	}
	r.i++
	return true
}

// Score reads the score of an entry inside the window of period per ending
// at t and returns the time until it leaves the window: at least 1, and
// more than per for an entry scored after t (admitted before the server's
// clock went back).
func (r *Reader) Score(t, per int64) int64 {
	d := r.Int(MaxTime-1) + per - t
	if r.Err == nil && d < 1 {
		return r.Fail("score outside its window")
	}
	return d
}

// readCal reads the reply of calendar key k of c decided at t (µs): what
// the period holds and the time to its end, which is the window's reset
// and, when the request does not fit, its wait.
func readCal(r *Reader, p *plan.Plan, res []int64, k int32, t int64) {
	j := p.WinStart[k]
	used := r.Int(scriptconst.MaxTotal)
	left := r.Int(plan.CalNominal(ruletime.Month))
	if r.Err == nil && left < 1 {
		r.Fail("calendar period ended")
	}
	var wait int64
	if used+p.Cost[k] > p.Wins[j].Limit {
		wait = left
	}
	res[3*j], res[3*j+1], res[3*j+2] = used, left, wait
	b := &p.Cals[k].Bounds
	for i := 1; i < plan.CalBounds; i++ {
		if b[i] == t+left {
			p.Cals[k].Start = b[i-1] // the period the script counted in
		}
	}
}

// readHeld reads the mask of the windows of distinct key k that held its
// value before the op (an admitted request adds nothing to them) and what
// undoing the op decided at t would restore.
func readHeld(r *Reader, p *plan.Plan, k int32, t int64) {
	n := p.WinStart[k+1] - p.WinStart[k]
	mask := r.Int(1<<n - 1)
	for len(p.DistinctPrev) < len(p.Keys) {
		p.DistinctPrev, p.DistinctAt = append(p.DistinctPrev, 0), append(p.DistinctAt, 0)
	}
	p.DistinctPrev[k], p.DistinctAt[k] = r.Int(MaxTime), t
	for len(p.Held) < len(p.Wins) {
		p.Held = append(p.Held, false)
	}
	for j := p.WinStart[k]; j < p.WinStart[k+1]; j++ {
		p.Held[j] = mask&(1<<(j-p.WinStart[k])) != 0
	}
}
