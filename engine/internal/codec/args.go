// Package codec writes the arguments of the engine's script calls and
// reads their replies. The wire format is specified once, in the header of
// lua/multi_window.lua. Args builds the arguments, every field its own
// string so that the script decodes nothing. Reader and ReadOp read the
// reply, an array of integers that go-redis reads into one []int64. The
// package decides nothing: the engine runs the calls.
package codec

import (
	"strconv"
	"time"

	"github.com/slidelimit/slidelimit/engine/internal/plan"
	"github.com/slidelimit/slidelimit/internal/scriptconst"
)

// Bounds of the decision time, in microseconds since 1970: the script's
// windows need t > every period (so the retention marker, scored
// -retention, is never counted) and t < 2^53 (exact in Lua's doubles).
const (
	MinTime = 946_684_800_000_000   // 2000-01-01
	MaxTime = 8_835_955_200_000_000 // 2250-01-01 UTC
)

// Op statuses of the script.
const (
	StatusDenied    = scriptconst.StatusDenied
	StatusAdmitted  = scriptconst.StatusAdmitted
	StatusCollision = scriptconst.StatusCollision // no unique member found; nothing written

	// MaxSuffix is how many suffixed members an admission tries after
	// member collisions. This is its one definition: every script call
	// passes it (see lua/multi_window.lua).
	MaxSuffix = 32
)

// bufArg is one script argument: a slice of a batch's argument buffer. A
// pointer to it fits in an interface without allocating, and go-redis
// writes it with MarshalBinary.
type bufArg struct{ b []byte }

// MarshalBinary returns the argument's bytes.
func (a *bufArg) MarshalBinary() ([]byte, error) { return a.b, nil }

// String returns the argument as text, for traces and errors.
func (a *bufArg) String() string { return string(a.b) }

// Args builds the arguments of script calls (see
// lua/multi_window.lua): every field is appended to buf and its end
// recorded in ends.
type Args struct {
	Buf  []byte
	Ends []int32
	args []bufArg
	now  int64       // the engine's time of the call being built (µs since 1970), for calendar keys
	cals []calCached // calendar boundaries computed before (see bounds)
	// lastCal is the call's last calendar key (see calArgs).
	lastCal calLast
	// first is the index in ends of the first field of the script call
	// being built, and call numbers it among all calls f built (from 1).
	first int
	call  uint64
}

// Reset empties f and begins a script call at time t (see Begin).
func (f *Args) Reset(t int64) {
	f.Clear()
	f.Begin(t)
}

// Clear empties f for the script calls of another batch.
func (f *Args) Clear() {
	f.Buf, f.Ends, f.args = f.Buf[:0], f.Ends[:0], f.args[:0]
}

// Begin starts the arguments of one more script call at time t (µs, or 0
// for the server's TIME) and returns the index of its first field, for
// appendFrom. The script takes maxSuffix from its arguments, so that the
// limit is defined here only.
func (f *Args) Begin(t int64) int { return f.BeginPart(t, false) }

// BeginPart is Begin for a call whose ops are parts of requests (part):
// another call decides each request's other keys, so the script replies
// every window's oldest entry, which a denial by another part reports
// (lua/multi_window.lua: a negative max_suffix, see unread).
func (f *Args) BeginPart(t int64, part bool) int {
	f.first = len(f.Ends)
	f.call++
	f.Int(t)
	if part {
		f.Int(-MaxSuffix)
	} else {
		f.Int(MaxSuffix)
	}
	f.now = t
	return f.first
}

// Int appends v as a field.
func (f *Args) Int(v int64) {
	f.Buf = strconv.AppendInt(f.Buf, v, 10)
	f.Ends = append(f.Ends, int32(len(f.Buf)))
}

// Op appends the allow op of member over the keys listed in keys (indices
// into p.Keys), or a peek op when member is empty. shared marks an op that
// shares a key with another op of the script call: the script then derives
// the later op's windows from the earlier's instead of reading them again.
func (f *Args) Op(member []byte, p *plan.Plan, keys []int32, shared bool) {
	f.Buf = append(f.Buf, member...)
	f.Ends = append(f.Ends, int32(len(f.Buf)))
	nkeys := int64(p.NArgs(keys))
	if shared {
		nkeys = -nkeys
	}
	f.Int(nkeys)
	for _, k := range keys {
		ws := p.Wins[p.WinStart[k]:p.WinStart[k+1]]
		if p.IsCal(int(k)) {
			if f.now == 0 {
				f.now = time.Now().UnixMicro()
			}
			f.calArgs(p, k, f.now)
			f.block(p, k)
			continue
		}
		if p.Slot[k] {
			f.Int(0)
			f.Buf = append(f.Buf, 'S')
			f.Ends = append(f.Ends, int32(len(f.Buf)))
			f.Int(ws[0].Limit)
			f.Int(ws[0].Period) // the lease
			continue
		}
		if p.IsDistinct(int(k)) {
			f.distinctArgs(p, k)
			f.block(p, k)
			continue
		}
		if !p.Weighted[k] {
			f.Int(int64(len(ws)))
			f.Int((ws[0].Period + 7) / 8)
			for _, w := range ws {
				f.Int(w.Period)
				f.Int(w.Limit)
			}
			if p.HasUnstable(int(k)) {
				f.unstable(p)
			}
			f.block(p, k)
			continue
		}
		f.Int(-int64(len(ws)))
		f.Int((ws[0].Period + 7) / 8)
		f.Int(p.Cost[k])
		for _, w := range ws {
			f.Int(w.Period)
			f.Int(w.Limit)
			f.Int(w.Grain)
		}
		f.block(p, k)
	}
}

// Finish appends the finish op of member over fin[k] for each k in keys
// (see lua/multi_window.lua), which publishes its removals on channel. A
// field costs Redis about as much as the script's work on it, so a field
// that holds its usual value is left out: the channel when the op
// publishes nothing, a suffix of 0, a grain outside mode 'g'.
func (f *Args) Finish(member string, fin []Undo, keys []int32, channel string) {
	f.Buf = append(f.Buf, '-')
	f.Str(member)
	pub := ""
	for _, k := range keys {
		if fin[k].Publishes() {
			pub = channel
		}
	}
	if pub == "" {
		f.Int(int64(len(keys)))
	} else {
		f.Int(-int64(len(keys)))
		f.Str(pub)
	}
	for _, k := range keys {
		u := &fin[k]
		switch u.Kind {
		case KindCal:
			f.Buf = append(f.Buf, 'A')
			f.Str("")
			if u.Cal == 0 {
				f.Str("")
			} else {
				f.Int(u.Cal)
			}
			f.Int(u.Delta)
			continue
		case KindDistinct:
			f.Buf = append(f.Buf, 'R')
			f.Str("")
			f.Str(u.Value)
			f.Int(u.At)
			f.Int(u.Prev)
			continue
		case KindWeighted:
			f.Buf = append(f.Buf, u.Mode) // 'r', 's' or 'g'
		default:
			f.Buf = append(f.Buf, u.Kind)
		}
		if u.Suffix != 0 {
			f.Buf = strconv.AppendInt(f.Buf, u.Suffix, 10)
		}
		f.Str("")
		if u.Kind == KindWeighted {
			f.Int(u.Delta)
			f.Int(u.At)
			f.Int(u.Cost)
			if u.Mode == 'g' {
				f.Int(u.Grain)
			}
		}
	}
}

// Str appends s as the rest of the current field, and ends it.
func (f *Args) Str(s string) {
	f.Buf = append(f.Buf, s...)
	f.Ends = append(f.Ends, int32(len(f.Buf)))
}

// block appends the fields of key k's block key, if it has a block.
func (f *Args) block(p *plan.Plan, k int32) {
	if b := p.BlockOf(int(k)); b > 0 {
		f.Int(0)
		f.Buf = append(f.Buf, 'B')
		f.Ends = append(f.Ends, int32(len(f.Buf)))
		f.Int(b)
	}
}

// unstable appends the 'U' fields of a key holding copies (see Regions in
// lua/multi_window.lua): 0, 'U', the region's index, the regions' number.
func (f *Args) unstable(p *plan.Plan) {
	f.Int(0)
	f.Buf = append(f.Buf, 'U')
	f.Ends = append(f.Ends, int32(len(f.Buf)))
	f.Int(p.Share.Index)
	f.Int(p.Share.Regions)
}

// AppendTo appends the arguments to args, each a pointer into f: f must
// not change until the command has been sent.
func (f *Args) AppendTo(args []any) []any {
	f.args = f.args[:0]
	return f.AppendFrom(args, 0)
}

// AppendFrom appends the arguments from field first on, like appendTo, and
// leaves those appended before in place: the cluster path builds the
// script calls of a whole batch in one Args.
func (f *Args) AppendFrom(args []any, first int) []any {
	n := len(f.Ends) - first
	if cap(f.args)-len(f.args) < n {
		// A new array rather than a copy: the pointers already handed out
		// keep the old one alive and unchanged.
		f.args = make([]bufArg, 0, max(2*cap(f.args), n))
	}
	prev := int32(0)
	if first > 0 {
		prev = f.Ends[first-1]
	}
	for _, end := range f.Ends[first:] {
		f.args = append(f.args, bufArg{b: f.Buf[prev:end:end]})
		args = append(args, &f.args[len(f.args)-1])
		prev = end
	}
	return args
}

// calArgs appends the fields of calendar key k of p: 0, 'P', cost, limit,
// then the boundaries around now (µs since 1970), which p keeps for
// readCal; or, when an earlier key of the same script call sent those
// boundaries, 0, 'Q', cost, limit and the index in ARGV of the first; or,
// when the previous calendar key of the call was the same key with the
// same fields (a batch on a hot subject), 0 and 'q'.
func (f *Args) calArgs(p *plan.Plan, k int32, now int64) {
	x := f.bounds(p.Cal(int(k)), p.Location(), now)
	p.Cals[k].Bounds = x.b
	cost, limit := p.Cost[k], p.Wins[p.WinStart[k]].Limit
	f.Int(0)
	kind := byte('P')
	if x.call == f.call {
		kind = 'Q'
		if l := &f.lastCal; l.call == f.call && l.at == x.at && l.cost == cost && l.limit == limit && l.key == p.Keys[k] {
			kind = 'q'
		}
	}
	f.Buf = append(f.Buf, kind)
	f.Ends = append(f.Ends, int32(len(f.Buf)))
	if kind == 'q' {
		return
	}
	f.Int(cost)
	f.Int(limit)
	if kind == 'P' {
		x.call, x.at = f.call, len(f.Ends)
		for _, b := range x.b {
			f.Int(b)
		}
	} else {
		f.Int(int64(x.at - f.first + 1))
	}
	// The key is a view of a plan reused after the batch: it is compared
	// while the batch's arguments are built only (call says which).
	f.lastCal = calLast{key: p.Keys[k], cost: cost, limit: limit, at: x.at, call: f.call}
}

// calLast is the last calendar key a script call being built sent with
// its fields, which the next may repeat as 'q' (see calArgs).
type calLast struct {
	key         string
	cost, limit int64
	at          int    // calCached.at of its boundaries
	call        uint64 // Args.call of the script call; 0: none
}

// calCached is the boundaries of the periods around a time, for one
// calendar and zone, and where the script call being built holds them.
type calCached struct {
	cal  string
	loc  *time.Location
	b    [plan.CalBounds]int64
	call uint64 // Args.call of the script call that sent them; 0: none
	at   int    // the index of their first field in Args.Ends
}

// bounds returns the entry of calBoundsAround(c, now, loc), from f's cache
// while now lies in the cached current period: computing them takes a
// dozen time.Date calls, a period lasts a day or more. The entry is valid
// until the next call of bounds.
func (f *Args) bounds(c string, loc *time.Location, now int64) *calCached {
	for i := range f.cals {
		if x := &f.cals[i]; x.cal == c && x.loc == loc && now >= x.b[1] && now < x.b[2] {
			return x
		}
	}
	b := plan.CalBoundsAround(c, now, loc)
	if len(f.cals) >= 4 {
		f.cals = f.cals[:0]
	}
	f.cals = append(f.cals, calCached{cal: c, loc: loc, b: b})
	return &f.cals[len(f.cals)-1]
}

// distinctArgs appends the fields of distinct key k: 0, 'D', the value's
// member, then its windows as a count key's.
func (f *Args) distinctArgs(p *plan.Plan, k int32) {
	f.Int(0)
	f.Buf = append(f.Buf, 'D')
	f.Ends = append(f.Ends, int32(len(f.Buf)))
	f.Buf = append(f.Buf, p.Distinct[k]...)
	f.Ends = append(f.Ends, int32(len(f.Buf)))
	ws := p.Wins[p.WinStart[k]:p.WinStart[k+1]]
	f.Int(int64(len(ws)))
	f.Int((ws[0].Period + 7) / 8)
	for _, w := range ws {
		f.Int(w.Period)
		f.Int(w.Limit)
	}
}
