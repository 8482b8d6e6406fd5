package denials

import "github.com/slidelimit/slidelimit/engine/internal/plan"

// The known cache keeps one answer per key, the one whose call was sent
// last: an answer to a call sent after another answer arrived was decided
// after it. But calls in flight together (on several connections, or in
// one step of a test clock that stands still) may be decided by Redis in
// any order, so the kept answer may be older than one it replaced, or than
// one that came after it and was not kept: a held distinct value's answer
// said 2 of 3 where a new value's, decided after it, said 3 of 3, and the
// process's fallback admitted one more than the bound of docs/operations.md
// (a subject this process saw full gets none).
//
// The floor keeps, for the local fallback, the counts of those answers,
// while Redis may have decided them last: until an answer is kept whose
// call was sent after they arrived. The fallback starts from the highest
// count of the kept answer and the floor (seedOf), which errs on denying:
// entries that left a window between two such answers count. Cached
// denials use the kept answer alone, whose deadlines are exact.

// floorWin is a window of an answer Redis may have decided after the kept
// one: its count, and when that answer arrived (e.mono and the local wall
// clock).
type floorWin struct {
	period, limit, used int64
	recv, wall          int64
}

// maxFloor bounds a window's floor entries: beyond it, the two that
// arrived first become one, with the higher count and the later times,
// which only errs further on denying.
const maxFloor = 4

// lift adds to kk's floor the windows ws of an answer that arrived at recv
// (e.mono) and wall, except those an entry already covers: one of the kept
// answer's or of the floor's with at least the count, known as long (an
// answer that arrived no earlier). Called with the shard locked.
func (kk *Key) lift(ws []Win, recv, wall int64) {
	for _, w := range ws {
		if kw := kk.Find(plan.Window{Period: w.Period, Limit: w.Limit}); kw != nil && kw.Used >= w.Used && kk.Recv >= recv {
			continue
		}
		covered, n := false, 0
		for _, f := range kk.floor {
			if f.period == w.Period && f.limit == w.Limit {
				covered = covered || f.used >= w.Used && f.recv >= recv
				n++
			}
		}
		if covered {
			continue
		}
		kk.floor = append(kk.floor, floorWin{period: w.Period, limit: w.Limit, used: w.Used, recv: recv, wall: wall})
		kk.trim()
		if n+1 > maxFloor {
			kk.squash(w.Period, w.Limit)
		}
	}
}

// trim drops the floor's entries another entry covers: the kept answer's
// or the floor's, with at least the count, known at least as long.
// Called with the shard locked.
func (kk *Key) trim() {
	out := kk.floor[:0]
	for i, f := range kk.floor {
		kw := kk.Find(plan.Window{Period: f.period, Limit: f.limit})
		covered := kw != nil && kw.Used >= f.used && kk.Recv >= f.recv
		for j, g := range kk.floor {
			if covered {
				break
			}
			// Of two equal entries, the first stays.
			covered = j != i && g.period == f.period && g.limit == f.limit && g.used >= f.used && g.recv >= f.recv &&
				(g.used > f.used || g.recv > f.recv || j < i)
		}
		if !covered {
			out = append(out, f)
		}
	}
	clear(kk.floor[len(out):])
	kk.floor = out
}

// squash makes the two entries of the window (period, limit) that arrived
// first one. Called with the shard locked.
func (kk *Key) squash(period, limit int64) {
	a, b := -1, -1 // the first and second to arrive
	for i, f := range kk.floor {
		if f.period != period || f.limit != limit {
			continue
		}
		switch {
		case a < 0 || f.recv < kk.floor[a].recv:
			a, b = i, a
		case b < 0 || f.recv < kk.floor[b].recv:
			b = i
		}
	}
	if b < 0 {
		return
	}
	fb := &kk.floor[b]
	fb.used = max(fb.used, kk.floor[a].used)
	fb.recv = max(fb.recv, kk.floor[a].recv)
	fb.wall = max(fb.wall, kk.floor[a].wall)
	kk.floor = append(kk.floor[:a], kk.floor[a+1:]...)
}

// prune drops the floor's entries of answers that arrived before sent
// (e.mono): a call sent then is decided after them. Called with the shard
// locked.
func (kk *Key) prune(sent int64) {
	out := kk.floor[:0]
	for _, f := range kk.floor {
		if f.recv >= sent {
			out = append(out, f)
		}
	}
	clear(kk.floor[len(out):])
	kk.floor = out
}

// raise raises kn's windows to the counts of floor's entries, each for the
// window of period rename(its period) (none when 0), and kn's wall to the
// entry's when it raised one: the fallback enters the counts as admitted
// then (see fallback.Limiter.seed), and the entries that answer counted may
// have been admitted after kn's answer arrived.
func (kn *Key) raise(floor []floorWin, rename func(period int64) int64) {
	for _, f := range floor {
		period := rename(f.period)
		if period == 0 {
			continue
		}
		kw := kn.Find(plan.Window{Period: period, Limit: f.limit})
		if kw == nil {
			kn.Wins = append(kn.Wins, Win{Period: period, Limit: f.limit})
			kw = &kn.Wins[len(kn.Wins)-1]
		}
		if f.used > kw.Used {
			kw.Used = f.used
			kn.Wall = max(kn.Wall, f.wall)
		}
	}
}
