package engine

import (
	"math"
	"strconv"
	"strings"
)

// The script's argument is one JSON array (see lua/multi_window.lua):
//
//	[t, nops, op...]   op = mode, "member", nkeys, key...
//	key = nwin, {period, limit}...              a count key
//	key = -nwin, cost, {period, limit, grain}... a weighted key
//
// and its reply one string of space-separated integers:
//
//	sec usec {code {used [oldest [edge]]}...}...
//
// One string each way keeps go-redis from boxing every element (an
// allocation each) and lets the reply be parsed without allocating.

// Op modes of the script.
const (
	opAllow = 1
	opPeek  = 2
)

// Op statuses of the script.
const (
	statusDenied    = 0
	statusAdmitted  = 1
	statusCollision = 2 // no unique member found; nothing written
	maxSuffix       = 32
)

func appendHeader(b []byte, t int64, nops int) []byte {
	b = append(b, '[')
	b = strconv.AppendInt(b, t, 10)
	b = append(b, ',')
	return strconv.AppendInt(b, int64(nops), 10)
}

// appendOp appends c's op over the keys listed in keys (indices into
// c.plan.keys).
func appendOp(b []byte, c *call, keys []int32) []byte {
	b = append(b, ',', '0'+c.mode, ',', '"')
	b = append(b, c.member...)
	b = append(b, '"', ',')
	b = strconv.AppendInt(b, int64(len(keys)), 10)
	p := &c.plan
	for _, k := range keys {
		ws := p.wins[p.kstart[k]:p.kstart[k+1]]
		b = append(b, ',')
		if !p.kw[k] {
			b = strconv.AppendInt(b, int64(len(ws)), 10)
			for _, w := range ws {
				b = append(b, ',')
				b = strconv.AppendInt(b, w.period, 10)
				b = append(b, ',')
				b = strconv.AppendInt(b, w.limit, 10)
			}
			continue
		}
		b = strconv.AppendInt(b, -int64(len(ws)), 10)
		b = append(b, ',')
		b = strconv.AppendInt(b, p.kcost[k], 10)
		for _, w := range ws {
			b = append(b, ',')
			b = strconv.AppendInt(b, w.period, 10)
			b = append(b, ',')
			b = strconv.AppendInt(b, w.limit, 10)
			b = append(b, ',')
			b = strconv.AppendInt(b, w.grain, 10)
		}
	}
	return b
}

// reader parses a script reply. The first problem sticks in err; later
// reads return 0.
type reader struct {
	s   string
	i   int
	err *ReplyError
}

func (r *reader) fail(reason string) int64 {
	if r.err == nil {
		r.err = newReplyError(reason, r.s)
	}
	return 0
}

// int reads the next non-negative decimal integer no larger than max.
func (r *reader) int(max int64) int64 {
	if r.err != nil {
		return 0
	}
	if r.i > 0 {
		if r.i >= len(r.s) || r.s[r.i] != ' ' {
			return r.fail("missing separator at " + strconv.Itoa(r.i))
		}
		r.i++
	}
	start := r.i
	var v int64
	for r.i < len(r.s) && r.s[r.i] != ' ' {
		d := r.s[r.i]
		if d < '0' || d > '9' {
			return r.fail("not a digit at " + strconv.Itoa(r.i))
		}
		if v > (max-int64(d-'0'))/10 {
			return r.fail("number out of range at " + strconv.Itoa(start))
		}
		v = v*10 + int64(d-'0')
		r.i++
	}
	if r.i == start {
		return r.fail("empty number at " + strconv.Itoa(start))
	}
	return v
}

// scoreValue reads a score. Redis prints integral scores as plain digits;
// other servers (miniredis) may use exponent notation, which is accepted
// when it denotes an integer.
func (r *reader) scoreValue() int64 {
	if r.err != nil {
		return 0
	}
	if r.i+1 >= len(r.s) || r.s[r.i] != ' ' {
		return r.int(maxTime) // reports what is missing
	}
	j := r.i + 1
	for j < len(r.s) && r.s[j] >= '0' && r.s[j] <= '9' {
		j++
	}
	if j == len(r.s) || r.s[j] == ' ' {
		return r.int(maxTime)
	}
	end := strings.IndexByte(r.s[r.i+1:], ' ')
	if end < 0 {
		end = len(r.s)
	} else {
		end += r.i + 1
	}
	f, err := strconv.ParseFloat(r.s[r.i+1:end], 64)
	if err != nil || f != math.Trunc(f) || f < 0 || f >= maxTime {
		return r.fail("bad score at " + strconv.Itoa(r.i+1))
	}
	r.i = end
	return int64(f)
}

// end checks that the whole reply was read.
func (r *reader) end() *ReplyError {
	if r.err == nil && r.i != len(r.s) {
		r.fail("trailing data at " + strconv.Itoa(r.i))
	}
	return r.err
}

// replyReader reads a script reply: a string of numbers (reader, the
// JSON-argument form of the cluster path) or an array of integers
// (ireader, the flat form of a single server). The first problem sticks.
type replyReader interface {
	int(max int64) int64
	score(t, per int64) int64
	fail(reason string) int64
}

// readOp reads the result of c's op over keys into c.res and returns its
// status and suffix. t is the decision time in µs: the reply holds scores,
// from which the waits follow.
func readOp(r *reader, c *call, keys []int32, t int64) (status, suffix int64) {
	return readOpFrom(r, c, keys, t)
}

// readOpFrom is readOp for either form of reply.
func readOpFrom[R replyReader](r R, c *call, keys []int32, t int64) (status, suffix int64) {
	code := r.int(statusCollision + 4*maxSuffix)
	status, suffix = code%4, code/4
	if status > statusCollision {
		r.fail("bad status")
	}
	p := &c.plan
	for _, k := range keys {
		cost := p.kcost[k]
		for j := p.kstart[k]; j < p.kstart[k+1]; j++ {
			w := p.wins[j]
			used := r.int(1 << 53)
			var reset, wait int64
			if used > 0 {
				reset = r.score(t, w.period)
				if used+cost > w.limit {
					wait = r.score(t, w.period)
				}
			}
			c.res[3*j], c.res[3*j+1], c.res[3*j+2] = used, reset, wait
		}
	}
	return status, suffix
}

// score reads the score of an entry inside the window of period per ending
// at t and returns the time until it leaves the window: at least 1, and
// more than per for an entry scored after t (admitted before the server's
// clock went back).
func (r *reader) score(t, per int64) int64 {
	d := r.scoreValue() + per - t
	if r.err == nil && d < 1 {
		return r.fail("score outside its window")
	}
	return d
}

// The flat format (see lua/multi_window.lua) passes every field as its own
// script argument, so the script decodes no JSON, and replies with an
// array of integers, which go-redis reads into one []int64:
//
//	args:  t, op...   op = member ("" for peek), nkeys, key...
//	key = nwin, busy, {period, limit}...               a count key
//	key = -nwin, busy, cost, {period, limit, grain}... a weighted key
//	reply: sec, usec, {code, {used [oldest [edge]]}...}...
//
// busy is the key's epoch length once it is busy, ceil(longest period /
// 8): the script names the epoch marker after it without formatting a
// number. In a weighted key, used is the window's summed cost and edge is
// present when used + cost > limit.

// bufArg is one script argument: a slice of a batch's argument buffer. A
// pointer to it fits in an interface without allocating, and go-redis
// writes it with MarshalBinary.
type bufArg struct{ b []byte }

// MarshalBinary returns the argument's bytes.
func (a *bufArg) MarshalBinary() ([]byte, error) { return a.b, nil }

// String returns the argument as text, for traces and errors.
func (a *bufArg) String() string { return string(a.b) }

// flatArgs builds the arguments of one script call in the flat format:
// every field is appended to buf and its end recorded in ends.
type flatArgs struct {
	buf  []byte
	ends []int32
	args []bufArg
}

func (f *flatArgs) reset(t int64) {
	f.buf, f.ends = f.buf[:0], f.ends[:0]
	f.int(t)
}

func (f *flatArgs) int(v int64) {
	f.buf = strconv.AppendInt(f.buf, v, 10)
	f.ends = append(f.ends, int32(len(f.buf)))
}

// op appends c's op over the keys listed in keys (indices into
// c.plan.keys).
func (f *flatArgs) op(c *call, keys []int32) {
	if c.mode == opAllow {
		f.buf = append(f.buf, c.member...)
	}
	f.ends = append(f.ends, int32(len(f.buf)))
	f.int(int64(len(keys)))
	p := &c.plan
	for _, k := range keys {
		ws := p.wins[p.kstart[k]:p.kstart[k+1]]
		if !p.kw[k] {
			f.int(int64(len(ws)))
			f.int((ws[0].period + 7) / 8)
			for _, w := range ws {
				f.int(w.period)
				f.int(w.limit)
			}
			continue
		}
		f.int(-int64(len(ws)))
		f.int((ws[0].period + 7) / 8)
		f.int(p.kcost[k])
		for _, w := range ws {
			f.int(w.period)
			f.int(w.limit)
			f.int(w.grain)
		}
	}
}

// appendTo appends the arguments to args, each a pointer into f: f must
// not change until the command has been sent.
func (f *flatArgs) appendTo(args []any) []any {
	if cap(f.args) < len(f.ends) {
		f.args = make([]bufArg, len(f.ends), 2*len(f.ends))
	}
	f.args = f.args[:len(f.ends)]
	prev := int32(0)
	for i, end := range f.ends {
		f.args[i].b = f.buf[prev:end:end]
		args = append(args, &f.args[i])
		prev = end
	}
	return args
}

// ireader reads a flat reply. The first problem sticks in err; later reads
// return 0.
type ireader struct {
	v   []int64
	i   int
	err *ReplyError
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
func (r *ireader) end() *ReplyError {
	if r.err == nil && r.i != len(r.v) {
		r.fail("trailing data")
	}
	return r.err
}

// score reads the score of an entry inside the window of period per ending
// at t and returns the time until it leaves the window (see reader.score).
func (r *ireader) score(t, per int64) int64 {
	d := r.int(maxTime-1) + per - t
	if r.err == nil && d < 1 {
		return r.fail("score outside its window")
	}
	return d
}

// readFlatOp is readOp for a flat reply.
func readFlatOp(r *ireader, c *call, keys []int32, t int64) (status, suffix int64) {
	return readOpFrom(r, c, keys, t)
}
