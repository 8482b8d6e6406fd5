package engine

import "github.com/slidelimit/slidelimit/engine/internal/plan"

// Distinct values (Check.Distinct, the rule statement distinct:NAME): a
// check that names a value counts the value in its count key instead of the
// request. The key's member is then the value's member (distinctMember),
// scored by the time the value last counted, not the request's id, so a
// value counts once in every window that holds it (lua/multi_window.lua,
// key kind 'D', specifies the rest).
//
// A distinct key is a count key sent with its value: the count key of the
// check's limiter, so that handlers sharing a scope share it.

// distinctArgs appends the fields of distinct key k: 0, 'D', the value's
// member, then its windows as a count key's.
func (f *flatArgs) distinctArgs(p *plan.Plan, k int32) {
	f.int(0)
	f.buf = append(f.buf, 'D')
	f.ends = append(f.ends, int32(len(f.buf)))
	f.buf = append(f.buf, p.Distinct[k]...)
	f.ends = append(f.ends, int32(len(f.buf)))
	ws := p.Wins[p.WinStart[k]:p.WinStart[k+1]]
	f.int(int64(len(ws)))
	f.int((ws[0].Period + 7) / 8)
	for _, w := range ws {
		f.int(w.Period)
		f.int(w.Limit)
	}
}

// readHeld reads the mask of the windows of distinct key k that held its
// value before the op (an admitted request adds nothing to them) and what
// undoing the op decided at t would restore.
func readHeld(r *ireader, p *plan.Plan, k int32, t int64) {
	n := p.WinStart[k+1] - p.WinStart[k]
	mask := r.int(1<<n - 1)
	for len(p.DistinctPrev) < len(p.Keys) {
		p.DistinctPrev, p.DistinctAt = append(p.DistinctPrev, 0), append(p.DistinctAt, 0)
	}
	p.DistinctPrev[k], p.DistinctAt[k] = r.int(maxTime), t
	for len(p.Held) < len(p.Wins) {
		p.Held = append(p.Held, false)
	}
	for j := p.WinStart[k]; j < p.WinStart[k+1]; j++ {
		p.Held[j] = mask&(1<<(j-p.WinStart[k])) != 0
	}
}

// distinctUndo makes u, the undo of distinct key k of p, the restore of
// its value: nothing (prev 0) when the op did not count the value anew or
// its reply was not read (a failed call: the value stays counted, erring
// on the side of denying).
func distinctUndo(p *plan.Plan, u *undo, k int) {
	u.kind = kindDistinct
	if k < len(p.DistinctPrev) && p.DistinctPrev[k] > 0 {
		u.value, u.at, u.prev = p.Distinct[k], p.DistinctAt[k], p.DistinctPrev[k]
	}
}
