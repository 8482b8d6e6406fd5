package engine

import (
	"context"
	"errors"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/slidelimit/slidelimit/engine/internal/plan"
	"github.com/slidelimit/slidelimit/internal/rulespec"
)

// Bounds of the decision time, in microseconds since 1970: the script's
// windows need t > every period (so the retention marker, scored
// -retention, is never counted) and t < 2^53 (exact in Lua's doubles).
const (
	minTime = 946_684_800_000_000   // 2000-01-01
	maxTime = 8_835_955_200_000_000 // 2250-01-01 UTC
)

var errClock = errors.New("engine: WithClock time outside 2000..2250")

// argTime returns the script's time argument: 0 for Redis TIME, or the
// test clock in microseconds.
func (e *Engine) argTime() (int64, error) {
	if e.clock == nil {
		return 0, nil
	}
	t := e.clock().UnixMicro()
	if t < minTime || t >= maxTime {
		return 0, errClock
	}
	return t, nil
}

// runAll decides a batch on a single Redis server with one script call:
// every key of every call, one op per call.
func (e *Engine) runAll(lead *call, batch []*call) {
	t, err := e.argTime()
	if err != nil {
		failAll(batch, err)
		return
	}
	ctx := lead.ctx.start(e.timeout)
	defer lead.ctx.stop()
	if e.fn.on.Load() == fnUnknown {
		e.prepareFn(ctx)
	}
	args := e.scriptArgs(lead, batch, t, lead.sharing(batch))
	sent := e.mono()
	v, err := e.evalInts(ctx, args)
	clear(args) // drop the pointers into other calls
	e.stamp(batch, sent)
	if err != nil {
		e.failRun(batch, err)
		return
	}
	r := ireader{v: v}
	sec, usec := r.int(maxTime/1e6), r.int(999_999)
	t = sec*1e6 + usec
	for _, c := range batch {
		c.sec, c.usec = sec, usec
		c.status, c.suffix = readFlatOp(&r, c, c.all, t)
	}
	if err := r.end(); err != nil {
		e.failRun(batch, err)
		return
	}
	for _, c := range batch {
		if c.status == statusCollision {
			c.err = errCollision
		}
	}
	e.runUndos(ctx, nil)
}

var errCollision = errors.New("engine: no unique member after retries")

// scriptArgs returns the arguments of the FCALL or EVALSHA (scriptHead)
// that decides batch at time t (µs, or 0 for the server's TIME), one op
// per call over all its keys, built in lead's buffers. shared marks the calls that share a key
// with another call of the batch (see call.sharing); nil marks none.
func (e *Engine) scriptArgs(lead *call, batch []*call, t int64, shared []bool) []any {
	cmd, name := e.scriptHead()
	args := append(lead.args[:0], cmd, name, 0)
	fa := &lead.flat
	fa.reset(t)
	nkeys := 0
	for ci, c := range batch {
		fa.op(c, c.all, shared != nil && shared[ci])
		for i := range c.plan.Keys {
			args = c.plan.AppendKeyArgs(args, i)
		}
		nkeys += len(c.plan.Keys) + c.plan.Blocked
	}
	args[2] = nkeys
	args = fa.appendTo(args)
	lead.args = args
	return args
}

// stamp stamps the calls of batch with the time their script call was
// sent and the time it came back.
func (e *Engine) stamp(batch []*call, sent int64) {
	recv, wall := e.recvWall()
	if e.clock == nil {
		e.lastAnswer.Store(recv) // recv is e.elapsed then
	}
	for _, c := range batch {
		c.sent, c.recv, c.wall = sent, recv, wall
	}
}

func failAll(batch []*call, err error) {
	for _, c := range batch {
		c.err = err
	}
}

// failRun fails a batch whose script call was sent: Redis may have counted
// its requests, so their undo is queued (see undoQueue).
func (e *Engine) failRun(batch []*call, err error) {
	for _, c := range batch {
		c.err = err
		e.queueUndo(c, c.all, -1)
	}
}

// evalInts runs the script with args ("fcall" or "evalsha", its name,
// numkeys, ...) in the format of lua/multi_window.lua and returns its
// reply. A call the server did not run goes again (see retryScripts).
func (e *Engine) evalInts(ctx context.Context, args []any) ([]int64, error) {
	cmd := redis.NewIntSliceCmd(ctx, args...)
	if err := e.client.Process(ctx, cmd); err != nil {
		cmds := []*redis.IntSliceCmd{cmd}
		e.retryScripts(ctx, cmds)
		cmd = cmds[0]
	}
	if err := cmd.Err(); err != nil {
		return nil, err
	}
	return cmd.Val(), nil
}

// noScript reports whether err is Redis's NOSCRIPT: the server does not
// have the script (SCRIPT FLUSH, a restart, a promoted replica), and the
// call must be sent again with its source.
func noScript(err error) bool { return err != nil && redis.HasErrorPrefix(err, "NOSCRIPT") }

// asEval turns the arguments of an EVALSHA ("evalsha", sha, numkeys, ...)
// into those of an EVAL of src, in place.
func asEval(args []any, src any) []any {
	args[0], args[1] = "eval", src
	return args
}

// Op modes of the script.
const (
	opAllow  = 1
	opPeek   = 2
	opFinish = 3 // see Finish
)

// Op statuses of the script.
const (
	statusDenied    = 0
	statusAdmitted  = 1
	statusCollision = 2 // no unique member found; nothing written

	// maxSuffix is how many suffixed members an admission tries after
	// member collisions. This is its one definition: every script call
	// passes it (see lua/multi_window.lua).
	maxSuffix = 32
)

// readFlatOp reads the result of c's op over keys into c.res and returns
// its status and suffix. t is the decision time in µs: the reply holds
// scores, from which the waits follow.
func readFlatOp(r *ireader, c *call, keys []int32, t int64) (status, suffix int64) {
	if c.mode == opFinish {
		readFinish(r, c.res[:0:0])
		for _, k := range keys {
			c.res[k] = r.int(2)
		}
		return statusAdmitted, 0
	}
	code := r.int(statusCollision + 4*maxSuffix)
	status, suffix = code%4, code/4
	if status > statusCollision {
		r.fail("bad status")
	}
	p := &c.plan
	for _, k := range keys {
		if p.Slot[k] {
			// A slot key replies its live slots only.
			j := p.WinStart[k]
			c.res[3*j], c.res[3*j+1], c.res[3*j+2] = r.int(plan.MaxCountLimit), 0, 0
			continue
		}
		if p.IsCal(int(k)) {
			readCal(r, c, k, t)
			if p.BlockOf(int(k)) > 0 {
				c.blockedFor(int(k), r.int(int64(rulespec.MaxPeriod/time.Microsecond)))
			}
			continue
		}
		if p.IsDistinct(int(k)) {
			readHeld(r, p, k, t)
		}
		cost := p.Cost[k]
		for j := p.WinStart[k]; j < p.WinStart[k+1]; j++ {
			w := p.Wins[j]
			used := r.int(1 << 53)
			var reset, wait int64
			if used > 0 {
				reset = r.score(t, w.Period)
				if used+cost > w.Limit {
					wait = r.score(t, w.Period)
				}
			}
			c.res[3*j], c.res[3*j+1], c.res[3*j+2] = used, reset, wait
		}
		if p.BlockOf(int(k)) > 0 {
			c.blockedFor(int(k), r.int(int64(rulespec.MaxPeriod/time.Microsecond)))
		}
	}
	return status, suffix
}

// blockedFor records that key k of c is blocked for left µs more (none
// when left is 0): every window of the key then waits at least that long.
func (c *call) blockedFor(k int, left int64) {
	c.bleft[k] = left
	if left == 0 {
		return
	}
	p := &c.plan
	for j := p.WinStart[k]; j < p.WinStart[k+1]; j++ {
		c.res[3*j+2] = max(c.res[3*j+2], left)
	}
}

// The script's arguments and reply (its wire format) are specified once,
// in the header of lua/multi_window.lua: flatArgs builds the arguments,
// every field its own string so that the script decodes nothing, and
// ireader and readFlatOp read the reply, an array of integers that
// go-redis reads into one []int64.

// bufArg is one script argument: a slice of a batch's argument buffer. A
// pointer to it fits in an interface without allocating, and go-redis
// writes it with MarshalBinary.
type bufArg struct{ b []byte }

// MarshalBinary returns the argument's bytes.
func (a *bufArg) MarshalBinary() ([]byte, error) { return a.b, nil }

// String returns the argument as text, for traces and errors.
func (a *bufArg) String() string { return string(a.b) }

// flatArgs builds the arguments of script calls (see
// lua/multi_window.lua): every field is appended to buf and its end
// recorded in ends.
type flatArgs struct {
	buf  []byte
	ends []int32
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

func (f *flatArgs) reset(t int64) {
	f.clear()
	f.begin(t)
}

// clear empties f for the script calls of another batch.
func (f *flatArgs) clear() {
	f.buf, f.ends, f.args = f.buf[:0], f.ends[:0], f.args[:0]
}

// begin starts the arguments of one more script call at time t (µs, or 0
// for the server's TIME) and returns the index of its first field, for
// appendFrom. The script takes maxSuffix from its arguments, so that the
// limit is defined here only.
func (f *flatArgs) begin(t int64) int {
	f.first = len(f.ends)
	f.call++
	f.int(t)
	f.int(maxSuffix)
	f.now = t
	return f.first
}

func (f *flatArgs) int(v int64) {
	f.buf = strconv.AppendInt(f.buf, v, 10)
	f.ends = append(f.ends, int32(len(f.buf)))
}

// op appends c's op over the keys listed in keys (indices into
// c.plan.keys). shared marks an op that shares a key with another op of
// the script call: the script then derives the later op's windows from
// the earlier's instead of reading them again.
func (f *flatArgs) op(c *call, keys []int32, shared bool) {
	if c.mode == opFinish {
		f.finish(c.fin[0].member, c.fin, keys, c.pub)
		return
	}
	if c.mode == opAllow {
		f.buf = append(f.buf, c.member...)
	}
	f.ends = append(f.ends, int32(len(f.buf)))
	p := &c.plan
	nkeys := int64(p.NArgs(keys))
	if shared {
		nkeys = -nkeys
	}
	f.int(nkeys)
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
			f.int(0)
			f.buf = append(f.buf, 'S')
			f.ends = append(f.ends, int32(len(f.buf)))
			f.int(ws[0].Limit)
			f.int(ws[0].Period) // the lease
			continue
		}
		if p.IsDistinct(int(k)) {
			f.distinctArgs(p, k)
			f.block(p, k)
			continue
		}
		if !p.Weighted[k] {
			f.int(int64(len(ws)))
			f.int((ws[0].Period + 7) / 8)
			for _, w := range ws {
				f.int(w.Period)
				f.int(w.Limit)
			}
			f.block(p, k)
			continue
		}
		f.int(-int64(len(ws)))
		f.int((ws[0].Period + 7) / 8)
		f.int(p.Cost[k])
		for _, w := range ws {
			f.int(w.Period)
			f.int(w.Limit)
			f.int(w.Grain)
		}
		f.block(p, k)
	}
}

// finish appends the finish op of member over fin[k] for each k in keys
// (see lua/multi_window.lua), which publishes its removals on channel. A
// field costs Redis about as much as the script's work on it, so a field
// that holds its usual value is left out: the channel when the op
// publishes nothing, a suffix of 0, a grain outside mode 'g'.
func (f *flatArgs) finish(member string, fin []undo, keys []int32, channel string) {
	f.buf = append(f.buf, '-')
	f.str(member)
	pub := ""
	for _, k := range keys {
		if fin[k].publishes() {
			pub = channel
		}
	}
	if pub == "" {
		f.int(int64(len(keys)))
	} else {
		f.int(-int64(len(keys)))
		f.str(pub)
	}
	for _, k := range keys {
		u := &fin[k]
		switch u.kind {
		case kindCal:
			f.buf = append(f.buf, 'A')
			f.str("")
			if u.cal == 0 {
				f.str("")
			} else {
				f.int(u.cal)
			}
			f.int(u.delta)
			continue
		case kindDistinct:
			f.buf = append(f.buf, 'R')
			f.str("")
			f.str(u.value)
			f.int(u.at)
			f.int(u.prev)
			continue
		case kindWeighted:
			f.buf = append(f.buf, u.mode) // 'r', 's' or 'g'
		default:
			f.buf = append(f.buf, u.kind)
		}
		if u.suffix != 0 {
			f.buf = strconv.AppendInt(f.buf, u.suffix, 10)
		}
		f.str("")
		if u.kind == kindWeighted {
			f.int(u.delta)
			f.int(u.at)
			f.int(u.cost)
			if u.mode == 'g' {
				f.int(u.grain)
			}
		}
	}
}

// str appends s as the rest of the current field, and ends it.
func (f *flatArgs) str(s string) {
	f.buf = append(f.buf, s...)
	f.ends = append(f.ends, int32(len(f.buf)))
}

// readFinish reads a finish op's code and its per-key flags into flags
// (0: unchanged, 1: changed, 2: refused, see lua/multi_window.lua).
func readFinish(r *ireader, flags []int64) {
	if r.int(1) != 1 && r.err == nil {
		r.fail("bad finish code")
	}
	for i := range flags {
		flags[i] = r.int(2)
	}
}

// block appends the fields of key k's block key, if it has a block.
func (f *flatArgs) block(p *plan.Plan, k int32) {
	if b := p.BlockOf(int(k)); b > 0 {
		f.int(0)
		f.buf = append(f.buf, 'B')
		f.ends = append(f.ends, int32(len(f.buf)))
		f.int(b)
	}
}

// appendTo appends the arguments to args, each a pointer into f: f must
// not change until the command has been sent.
func (f *flatArgs) appendTo(args []any) []any {
	f.args = f.args[:0]
	return f.appendFrom(args, 0)
}

// appendFrom appends the arguments from field first on, like appendTo, and
// leaves those appended before in place: the cluster path builds the
// script calls of a whole batch in one flatArgs.
func (f *flatArgs) appendFrom(args []any, first int) []any {
	n := len(f.ends) - first
	if cap(f.args)-len(f.args) < n {
		// A new array rather than a copy: the pointers already handed out
		// keep the old one alive and unchanged.
		f.args = make([]bufArg, 0, max(2*cap(f.args), n))
	}
	prev := int32(0)
	if first > 0 {
		prev = f.ends[first-1]
	}
	for _, end := range f.ends[first:] {
		f.args = append(f.args, bufArg{b: f.buf[prev:end:end]})
		args = append(args, &f.args[len(f.args)-1])
		prev = end
	}
	return args
}

// ireader reads a script reply. The first problem sticks in err; later reads
// return 0.
type ireader struct {
	v   []int64
	i   int
	err *replyError
}

func (r *ireader) fail(reason string) int64 {
	if r.err == nil {
		r.err = newReplyError(reason+" at "+strconv.Itoa(r.i), r.text())
	}
	return 0
}

// text returns the start of the reply, for errors.
func (r *ireader) text() string {
	var b []byte
	for i, v := range r.v {
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

// int reads the next integer, which must be in 0..max.
func (r *ireader) int(max int64) int64 {
	if r.err != nil {
		return 0
	}
	if r.i >= len(r.v) {
		return r.fail("missing number")
	}
	v := r.v[r.i]
	if v < 0 || v > max {
		return r.fail("number out of range")
	}
	r.i++
	return v
}

// end checks that the whole reply was read.
func (r *ireader) end() *replyError {
	if r.err == nil && r.i != len(r.v) {
		r.fail("trailing data")
	}
	return r.err
}

// score reads the score of an entry inside the window of period per ending
// at t and returns the time until it leaves the window: at least 1, and
// more than per for an entry scored after t (admitted before the server's
// clock went back).
func (r *ireader) score(t, per int64) int64 {
	d := r.int(maxTime-1) + per - t
	if r.err == nil && d < 1 {
		return r.fail("score outside its window")
	}
	return d
}
