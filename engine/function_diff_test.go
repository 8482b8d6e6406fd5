package engine

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/slidelimit/slidelimit/engine/internal/codec"
	"github.com/slidelimit/slidelimit/internal/redistest"
	"github.com/slidelimit/slidelimit/lua"
)

// TestFunctionMatchesEval runs the same random script calls (admissions,
// peeks and finish ops over count, block, weighted, slot, calendar and
// distinct keys, several ops a call, some marked as sharing a key) as
// FCALL of the loaded library on one server and as EVAL on another, at
// the same times, and checks after each call that the replies and every
// key are the same. The library outlives its calls, so state one call
// left behind (a memo, the calendar caches, the reply) would make a later
// FCALL differ from the EVAL, which starts afresh each time.
func TestFunctionMatchesEval(t *testing.T) {
	t.Parallel()
	testFunctionMatchesEval(t, false)
}

// TestFunctionMatchesEvalVaryingFields is TestFunctionMatchesEval with
// periods, limits, leases and block lengths that differ from op to op,
// many of them new (periods to the µs): the library memoizes the numbers
// of such fields, their texts and the window bounds from call to call
// (conf, decs, marks, lo_text in multi_window.lua), and a memo that kept
// a stale or wrong entry, or lost its bound, would make a later FCALL
// differ from the EVAL, whose memos start empty each call.
func TestFunctionMatchesEvalVaryingFields(t *testing.T) {
	t.Parallel()
	testFunctionMatchesEval(t, true)
}

func testFunctionMatchesEval(t *testing.T, vary bool) {
	_, fc := redistest.StartClient(t)
	_, ec := redistest.StartClient(t)
	ctx := context.Background()
	fn, lib := lua.Library()
	if err := fc.FunctionLoad(ctx, lib).Err(); err != nil {
		t.Fatal(err)
	}
	for seed := range uint64(4) {
		g := newDiffGen(seed)
		g.vary = vary
		for i := range 150 {
			keys, args := g.call()
			holdExpiring(t, g.keys(), fc, ec)
			fv, ferr := fc.FCall(ctx, fn, keys, args...).Int64Slice()
			ev, eerr := ec.Eval(ctx, lua.Script("multi_window"), keys, args...).Int64Slice()
			if fmt.Sprint(ferr) != fmt.Sprint(eerr) || !slices.Equal(fv, ev) {
				t.Fatalf("seed %d call %d %v %v:\nFCALL %v %v\nEVAL  %v %v", seed, i, keys, args, fv, ferr, ev, eerr)
			}
			g.learn(keys, args, ev)
			for _, k := range g.keys() {
				f, fttl := diffDump(t, fc, k)
				e, ettl := diffDump(t, ec, k)
				// The two servers set an expiry a moment apart.
				if f != e || (fttl > 0) != (ettl > 0) || fttl <= 0 && fttl != ettl || max(fttl-ettl, ettl-fttl) > time.Second {
					t.Fatalf("seed %d call %d %v %v: key %s differs:\nFCALL %s ttl %v\nEVAL  %s ttl %v", seed, i, keys, args, k, f, fttl, e, ettl)
				}
			}
		}
	}
}

// holdExpiring gives every key that would expire within a few seconds of
// real time, on either server, the same longer expiry on both: the calls
// run at a time of their own, and a key that expired between the FCALL
// and the EVAL (a block key lives its block's length in real time) would
// make the two servers differ by when they were asked, not by the script.
func holdExpiring(t *testing.T, keys []string, cs ...*redis.Client) {
	t.Helper()
	ctx := context.Background()
	const soon, hold = 5 * time.Second, time.Minute
	for _, k := range keys {
		expiring := false
		for _, c := range cs {
			if d := c.PTTL(ctx, k).Val(); d > 0 && d < soon {
				expiring = true
			}
		}
		if !expiring {
			continue
		}
		for _, c := range cs {
			if err := c.PExpire(ctx, k, hold).Err(); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// diffDump returns key's type and contents, and its PTTL.
func diffDump(t *testing.T, c *redis.Client, key string) (string, time.Duration) {
	t.Helper()
	ctx := context.Background()
	typ := c.Type(ctx, key).Val()
	var v any
	switch typ {
	case "zset":
		v = c.ZRangeWithScores(ctx, key, 0, -1).Val()
	case "hash":
		h := c.HGetAll(ctx, key).Val()
		ks := make([]string, 0, len(h))
		for k, x := range h {
			ks = append(ks, k+"="+x)
		}
		slices.Sort(ks)
		v = ks
	case "string":
		v = c.Get(ctx, key).Val()
	}
	return fmt.Sprintf("%s %v", typ, v), c.PTTL(ctx, key).Val()
}

// diffGen generates script calls in the wire format of
// lua/multi_window.lua over a few keys of each kind, at a time that moves
// on between calls, and remembers the members admitted, to finish them.
type diffGen struct {
	r        *rand.Rand
	vary     bool  // fields differ from op to op (see pick)
	t        int64 // the decision time, µs
	next     int   // members made
	admitted []diffAdmitted
	// per call being built
	keyList []string
	args    []any
}

// diffAdmitted is an admitted op: its member, suffix, time and keys.
type diffAdmitted struct {
	member string
	suffix int64
	at     int64
	keys   []diffKey
}

type diffKey struct {
	name string
	kind byte // 'c' count, 'w' weighted, 's' slot, 'p' calendar, 'd' distinct
	cost int64
	val  string // a distinct key's value
	prev int64  // what undoing a distinct count restores
	cal  int64  // a calendar key's period start
}

const diffDay = int64(24 * time.Hour / time.Microsecond)

func newDiffGen(seed uint64) *diffGen {
	// Near the end of a day, so that calls cross into the next one.
	t0 := (int64(1_800_000_000_000_000)/diffDay+1)*diffDay - int64(90*time.Second/time.Microsecond)
	return &diffGen{r: rand.New(rand.NewPCG(seed, 7)), t: t0}
}

func (g *diffGen) keys() []string {
	return []string{"c0{d}", "c1{d}", "b0{d}", "w0{d}", "w1{d}", "s0{d}", "p0{d}", "p1{d}", "d0{d}"}
}

func (g *diffGen) add(fields ...any) { g.args = append(g.args, fields...) }

func (g *diffGen) sec(n int64) int64 { return n * int64(time.Second/time.Microsecond) }

// pick returns def, or when g varies fields, half the time a number in
// [lo, hi].
func (g *diffGen) pick(def, lo, hi int64) int64 {
	if !g.vary || g.r.IntN(2) == 0 {
		return def
	}
	return lo + g.r.Int64N(hi-lo+1)
}

// count appends the fields of a count key's windows, longest first, with
// busy as the engine computes it (an eighth of the longest period).
func (g *diffGen) count(windows ...int64) {
	g.add(len(windows)/2, (windows[0]+7)/8)
	for _, w := range windows {
		g.add(w)
	}
}

// call returns the keys and arguments of the next call.
func (g *diffGen) call() ([]string, []any) {
	g.t += g.r.Int64N(g.sec(4))
	g.keyList, g.args = nil, []any{g.t, 3}
	ops := 1 + g.r.IntN(4)
	used := map[string]bool{}
	bounds := 0 // ARGV index of the call's first calendar boundaries
	for range ops {
		if len(g.admitted) > 0 && g.r.IntN(4) == 0 {
			g.finish()
			continue
		}
		member := ""
		if g.r.IntN(6) > 0 {
			g.next++
			member = "m" + strconv.Itoa(g.next)
		}
		// Some of the keys, each at most once in the op.
		var ks []string
		for _, k := range g.keys() {
			if k != "b0{d}" && g.r.IntN(3) == 0 {
				ks = append(ks, k)
			}
		}
		if len(ks) == 0 {
			ks = []string{"c0{d}"}
		}
		shared := false
		for _, k := range ks {
			shared = shared || used[k]
			used[k] = true
		}
		nkeysAt := len(g.args) + 1
		g.add(member, 0)
		n := 0
		for _, k := range ks {
			n++
			g.keyList = append(g.keyList, k)
			switch k[0] {
			case 'c':
				if k == "c0{d}" {
					g.count(g.pick(g.sec(60), g.sec(30), g.sec(90)), g.pick(5, 1, 8), g.pick(g.sec(1), g.sec(1)/2, g.sec(5)), g.pick(2, 1, 4))
					if g.r.IntN(2) == 0 {
						g.keyList = append(g.keyList, "b0{d}")
						g.add(0, "B", g.pick(g.sec(3), g.sec(1), g.sec(5)))
						n++
					}
				} else {
					g.count(g.pick(g.sec(10), g.sec(5), g.sec(15)), g.pick(3, 1, 5))
				}
			case 'w':
				cost := 1 + g.r.Int64N(5)
				if k == "w0{d}" {
					g.add(-2, g.sec(75), cost, g.sec(600), g.pick(40, 5, 60), g.sec(10), g.sec(60), g.pick(12, 2, 15), 0)
				} else {
					period := g.pick(g.sec(30), g.sec(20), g.sec(40))
					g.add(-1, (period+7)/8, cost, period, g.pick(9, 2, 12), 0)
				}
			case 's':
				g.add(0, "S", g.pick(2, 1, 4), g.pick(g.sec(20), g.sec(5), g.sec(30)))
			case 'p':
				// The engine's clock may lag the decision time: then
				// around midnight t lies in the engine's next period.
				day := (g.t - g.r.Int64N(2)*g.sec(60)) / diffDay * diffDay
				if bounds > 0 && g.r.IntN(2) == 0 {
					g.add(0, "Q", 1+g.r.Int64N(3), g.pick(20, 3, 25), bounds)
				} else {
					if bounds == 0 {
						bounds = len(g.args) + 5
					}
					g.add(0, "P", 1+g.r.Int64N(3), g.pick(20, 3, 25), day-diffDay, day, day+diffDay, day+2*diffDay)
				}
			case 'd':
				g.add(0, "D", "v:"+strconv.Itoa(g.r.IntN(4)))
				g.count(g.pick(g.sec(30), g.sec(20), g.sec(40)), g.pick(4, 1, 6), g.pick(g.sec(5), g.sec(2), g.sec(8)), g.pick(2, 1, 3))
			}
		}
		if shared && g.r.IntN(2) == 0 {
			n = -n
		}
		g.args[nkeysAt] = n
	}
	return g.keyList, g.args
}

// finish appends a finish op of an admitted member over some of its keys.
func (g *diffGen) finish() {
	i := g.r.IntN(len(g.admitted))
	a := g.admitted[i]
	g.admitted = slices.Delete(g.admitted, i, i+1)
	if len(a.keys) > 0 && g.r.IntN(2) == 0 {
		g.add("-"+a.member, -len(a.keys), "ch{d}")
	} else {
		g.add("-"+a.member, len(a.keys))
	}
	var fields []any
	for _, k := range a.keys {
		g.keyList = append(g.keyList, k.name)
		suffix := a.suffix
		if g.r.IntN(4) == 0 {
			suffix = -1
		}
		switch k.kind {
		case 'c':
			fields = append(fields, "C", suffix)
		case 's':
			fields = append(fields, "S", suffix)
		case 'w':
			switch {
			case g.r.IntN(2) == 0:
				fields = append(fields, "W", suffix, -k.cost, "r", a.at, 0, k.cost)
			case k.name == "w0{d}": // a grained window: mode 'g'
				fields = append(fields, "W", suffix, g.r.Int64N(7)-3, "g", a.at, g.sec(10), k.cost)
			default:
				fields = append(fields, "W", suffix, g.r.Int64N(7)-3, "s", a.at, 0, k.cost)
			}
		case 'p':
			fields = append(fields, "A", k.cal, -k.cost)
		case 'd':
			fields = append(fields, "R", k.val, a.at, k.prev)
		}
	}
	g.add(finishFields(fields)...)
}

// learn reads the reply v of the call made of keys and args, and
// remembers the members it admitted.
func (g *diffGen) learn(keys []string, args []any, v []int64) {
	r := 2 // reply index
	p := 2 // args index
	k := 0 // keys index
	num := func(a any) int64 {
		switch x := a.(type) {
		case int:
			return int64(x)
		case int64:
			return x
		}
		return 0
	}
	for p < len(args) {
		member := args[p].(string)
		if member != "" && member[0] == '-' {
			n := int(num(args[p+1]))
			p += 2
			if n < 0 {
				n = -n
				p++ // the channel
			}
			r += 1 + n
			for range n {
				switch kind := args[p].(string); kind[0] {
				case 'C', 'S':
					p++
				case 'r', 's':
					p += 4
				case 'g':
					p += 5
				case 'A':
					p += 3
				case 'R':
					p += 4
				}
				k++
			}
			continue
		}
		n := int(num(args[p+1]))
		if n < 0 {
			n = -n
		}
		code := v[r]
		r++
		p += 2
		a := diffAdmitted{member: member, suffix: code / 4, at: g.t}
		for range n {
			name := keys[k]
			k++
			nwin := num(args[p])
			switch {
			case nwin > 0:
				q := p + 2
				r = skipCountWindows(v, r, args, q, int(nwin), num)
				p = q + 2*int(nwin)
				a.keys = append(a.keys, diffKey{name: name, kind: 'c'})
			case nwin < 0:
				cost := num(args[p+2])
				q := p + 3
				for w := range int(-nwin) {
					used := v[r]
					r++
					if used > 0 {
						r++
						if used+cost > num(args[q+3*w+1]) {
							r++
						}
					}
				}
				p = q + 3*int(-nwin)
				a.keys = append(a.keys, diffKey{name: name, kind: 'w', cost: cost})
			default:
				switch args[p+1] {
				case "S":
					r++
					p += 4
					a.keys = append(a.keys, diffKey{name: name, kind: 's'})
				case "B":
					r++
					p += 3
				case "P", "Q":
					r += 2
					cost := num(args[p+2])
					day := g.t / diffDay * diffDay
					if args[p+1] == "P" {
						p += 8
					} else {
						p += 5
					}
					a.keys = append(a.keys, diffKey{name: name, kind: 'p', cost: cost, cal: day})
				case "D":
					val := args[p+2].(string)
					prev := v[r+1]
					r += 2
					dn := int(num(args[p+3]))
					q := p + 5
					r = skipCountWindows(v, r, args, q, dn, num)
					p = q + 2*dn
					if prev != 0 { // else undoing it restores nothing
						a.keys = append(a.keys, diffKey{name: name, kind: 'd', val: val, prev: prev})
					}
				}
			}
		}
		if member != "" && code%4 == codec.StatusAdmitted {
			g.admitted = append(g.admitted, a)
		}
	}
	if r != len(v) {
		panic(fmt.Sprintf("diffGen read %d of %d reply fields", r, len(v)))
	}
}

// skipCountWindows returns the index in reply v after the nwin windows of
// a count key read from r, whose (period, limit) fields start at args[q]:
// each window is used, then oldest when used > 0, then edge when full
// (num reads a field).
func skipCountWindows(v []int64, r int, args []any, q, nwin int, num func(any) int64) int {
	for w := range nwin {
		used := v[r]
		r++
		if used > 0 {
			r++
			if used >= num(args[q+2*w+1]) {
				r++
			}
		}
	}
	return r
}
