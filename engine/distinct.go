package engine

import (
	"github.com/slidelimit/slidelimit/internal/rulelimits"
)

// Distinct values (Check.Distinct, the rule statement distinct:NAME): a
// check that names a value counts the value in its count key instead of the
// request. The key's member is then the value's member (distinctMember),
// scored by the time the value last counted, not the request's id, so a
// value counts once in every window that holds it (lua/multi_window.lua,
// key kind 'D', specifies the rest).
//
// A distinct key is a count key sent with its value: the count key of the
// check's limiter, so that handlers sharing a scope share it.

// distinctPrefix starts a value's member: ids are decimal and markers
// start with 'r' or 'e', so no request's member can equal a value's.
const distinctPrefix = "v:"

// appendDistinct appends the member of value to b: distinctPrefix, then the
// value as a subject is written in keys: hashed when the engine hashes
// subjects (WithHashSubjects) or the value is long, escaped otherwise.
func (k *keyer) appendDistinct(b []byte, value string) []byte {
	b = append(b, distinctPrefix...)
	if k.hashAll || len(value) > maxRawSubject {
		return k.appendHashed(b, value)
	}
	return appendEscaped(b, value)
}

// distinct records that check i counts value in its count key idx.
func (p *plan) distinct(k *keyer, i int, idx int32, value string) error {
	for len(p.kd) <= int(idx) {
		p.kd = append(p.kd, "")
	}
	start := len(p.dbuf)
	p.dbuf = k.appendDistinct(p.dbuf, value)
	m := string(p.dbuf[start:])
	if p.kd[idx] != "" && p.kd[idx] != m {
		return &requestError{Check: i, Window: -1, Reason: "checks sharing a key (same scope, limiter and subject) count different distinct values"}
	}
	if p.kd[idx] == "" {
		p.nd++
	}
	p.kd[idx] = m
	return nil
}

// isDistinct reports whether key k counts a distinct value.
func (p *plan) isDistinct(k int) bool { return p.nd > 0 && k < len(p.kd) && p.kd[k] != "" }

// distinctArgs appends the fields of distinct key k: 0, 'D', the value's
// member, then its windows as a count key's.
func (f *flatArgs) distinctArgs(p *plan, k int32) {
	f.int(0)
	f.buf = append(f.buf, 'D')
	f.ends = append(f.ends, int32(len(f.buf)))
	f.buf = append(f.buf, p.kd[k]...)
	f.ends = append(f.ends, int32(len(f.buf)))
	ws := p.wins[p.kstart[k]:p.kstart[k+1]]
	f.int(int64(len(ws)))
	f.int((ws[0].period + 7) / 8)
	for _, w := range ws {
		f.int(w.period)
		f.int(w.limit)
	}
}

// readHeld reads the mask of the windows of distinct key k that held its
// value before the op (an admitted request adds nothing to them) and what
// undoing the op decided at t would restore.
func readHeld(r *ireader, p *plan, k int32, t int64) {
	n := p.kstart[k+1] - p.kstart[k]
	mask := r.int(1<<n - 1)
	for len(p.dprev) < len(p.keys) {
		p.dprev, p.dat = append(p.dprev, 0), append(p.dat, 0)
	}
	p.dprev[k], p.dat[k] = r.int(maxTime), t
	for len(p.held) < len(p.wins) {
		p.held = append(p.held, false)
	}
	for j := p.kstart[k]; j < p.kstart[k+1]; j++ {
		p.held[j] = mask&(1<<(j-p.kstart[k])) != 0
	}
}

// distinctUndo makes u, the undo of distinct key k of p, the restore of
// its value: nothing (prev 0) when the op did not count the value anew or
// its reply was not read (a failed call: the value stays counted, erring
// on the side of denying).
func (p *plan) distinctUndo(u *undo, k int) {
	u.kind = kindDistinct
	if k < len(p.dprev) && p.dprev[k] > 0 {
		u.value, u.at, u.prev = p.kd[k], p.dat[k], p.dprev[k]
	}
}

// heldAt reports whether window m held the request's distinct value
// before a decision of Redis.
func (p *plan) heldAt(m int32) bool { return p.nd > 0 && int(m) < len(p.held) && p.held[m] }

// maxDistinctWindows bounds the windows of a distinct key, whose reply
// holds one bit per window: the rule language's bound.
const maxDistinctWindows = rulelimits.MaxDistinctWindows
