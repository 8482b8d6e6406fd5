package replay

import (
	"github.com/slidelimit/slidelimit/engine"
)

// A decider decides replayed requests in time order. counted says whether
// the request stays counted once admitted (the group's count: statement
// and the logged status); an admitted request that is not is given back.
type decider interface {
	decide(scope string, req *engine.Request, counted bool, t int64, v *verdict) error
	Close() error
}

// verdict is what a decision says about each check, for the report.
type verdict struct {
	allowed bool
	checks  []checkVerdict
}

type checkVerdict struct {
	full    []bool // full[w]: window w had no room for the request
	blocked bool   // a block in force denied it
	started bool   // its denial started a block
}

func (v *verdict) reset(req *engine.Request) {
	v.allowed = false
	n := len(req.Checks)
	if cap(v.checks) < n {
		v.checks = make([]checkVerdict, n)
	}
	v.checks = v.checks[:n]
	for i, c := range req.Checks {
		cv := &v.checks[i]
		full := cv.full[:0]
		for range c.Windows {
			full = append(full, false)
		}
		*cv = checkVerdict{full: full}
	}
}

// local decides in process what the script (lua/multi_window.lua) decides
// for windows without a grain: every window of every key is read, a block
// in force denies, and only when all have room is the request added to
// every key; the first denial of a key with a block starts it. Times only
// grow (the replay is in time order), so each key is a log of admission
// times with running totals of their costs. The differential test
// (TestDifferentialRedis) holds it to the script on a real Redis.
//
// Memory is bounded by the live windows: a key keeps the entries of its
// longest window, and keys with no live entry and no block in force are
// swept every sweepEvery decisions.
type local struct {
	keys  map[string]*lkey
	n     int
	buf   []byte
	ks    []*lkey // the keys of the request being decided
	swept int64   // time of the last sweep
}

type lkey struct {
	t     []int64 // admission times, µs, ascending
	cum   []int64 // cum[i]: total cost of entries up to i, from the first ever
	start int     // entries before start have left the longest window
	base  int64   // total cost of the entries before start
	ret   int64   // longest period, µs
	block int64   // end of the block in force, µs; 0: none
}

// sweepEvery is how many decisions pass between sweeps of dead keys.
const sweepEvery = 1 << 16

func newLocal() *local { return &local{keys: make(map[string]*lkey)} }

func (l *local) Close() error { return nil }

// Keys reports how many keys are held, for the memory test.
func (l *local) size() (keys, entries int) {
	for _, k := range l.keys {
		keys++
		entries += len(k.t) - k.start
	}
	return keys, entries
}

func (l *local) key(scope string, c *engine.Check) string {
	b := l.buf[:0]
	b = append(b, scope...)
	b = append(b, 0)
	b = append(b, c.Rule.ID()...)
	b = append(b, 0)
	b = append(b, c.Subject...)
	l.buf = b
	return string(b)
}

func (l *local) decide(scope string, req *engine.Request, counted bool, t int64, v *verdict) error {
	v.reset(req)
	ks := l.ks[:0]
	ok := true
	for i := range req.Checks {
		c := &req.Checks[i]
		name := l.key(scope, c)
		k := l.keys[name]
		if k == nil {
			k = &lkey{}
			l.keys[name] = k
		}
		ks = append(ks, k)
		cost := max(c.Cost, 1)
		for j, w := range c.Windows {
			p := w.Period.Microseconds()
			k.ret = max(k.ret, p)
			if k.used(t-p+1)+cost > w.Limit {
				v.checks[i].full[j], ok = true, false
			}
		}
		if k.block > t {
			v.checks[i].blocked, ok = true, false
		}
	}
	if !ok {
		for i := range req.Checks {
			b := req.Checks[i].Block
			if b <= 0 || v.checks[i].blocked || !anyTrue(v.checks[i].full) {
				continue
			}
			ks[i].block = t + ceilMs(b.Microseconds())
			v.checks[i].started = true
		}
	} else {
		v.allowed = true
		if counted {
			for i := range req.Checks {
				ks[i].add(t, max(req.Checks[i].Cost, 1))
			}
		}
	}
	l.ks = ks
	if l.n++; l.n%sweepEvery == 0 {
		l.sweep(t)
	}
	return nil
}

func ceilMs(us int64) int64 { return (us + 999) / 1000 * 1000 }

func anyTrue(bs []bool) bool {
	for _, b := range bs {
		if b {
			return true
		}
	}
	return false
}

// used returns the total cost of the entries at or after from.
func (k *lkey) used(from int64) int64 {
	n := len(k.t)
	if n == k.start || k.t[n-1] < from {
		return 0
	}
	lo, hi := k.start, n-1 // the first entry >= from is in [lo, hi]
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if k.t[m] < from {
			lo = m + 1
		} else {
			hi = m
		}
	}
	before := k.base
	if lo > k.start {
		before = k.cum[lo-1]
	}
	return k.cum[n-1] - before
}

// add appends an admission at t (not before the last) and drops the
// entries that left the longest window.
func (k *lkey) add(t, cost int64) {
	total := k.base
	if len(k.t) > k.start {
		total = k.cum[len(k.cum)-1]
	}
	k.t = append(k.t, t)
	k.cum = append(k.cum, total+cost)
	for k.start < len(k.t) && k.t[k.start] <= t-k.ret {
		k.base = k.cum[k.start]
		k.start++
	}
	if k.start > 32 && k.start > len(k.t)/2 {
		k.t = append(k.t[:0], k.t[k.start:]...)
		k.cum = append(k.cum[:0], k.cum[k.start:]...)
		k.start = 0
	}
}

// sweep drops the keys whose entries have all left their windows and whose
// block has ended.
func (l *local) sweep(t int64) {
	for name, k := range l.keys {
		if (len(k.t) == k.start || k.t[len(k.t)-1] <= t-k.ret) && k.block <= t {
			delete(l.keys, name)
		}
	}
	l.swept = t
}
