package plan

import (
	"github.com/slidelimit/slidelimit/internal/keyparts"
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
// check's rule, so that handlers sharing a scope share it.

// DistinctPrefix starts a value's member: ids are decimal and markers
// start with 'r' or 'e', so no request's member can equal a value's.
const DistinctPrefix = "v:"

// appendDistinct appends the member of value to b: DistinctPrefix, then the
// value as a subject is written in keys: hashed when the engine hashes
// subjects (WithHashedSubjects) or the value is long, escaped otherwise.
func (k *Keyer) appendDistinct(b []byte, value string) []byte {
	b = append(b, DistinctPrefix...)
	if k.HashAll || len(value) > MaxRawSubject {
		return k.AppendHashed(b, value)
	}
	return keyparts.AppendEscaped(b, value)
}

// distinct records that check i counts value in its count key idx.
func (p *Plan) distinct(k *Keyer, i int, idx int32, value string) error {
	for len(p.Distinct) <= int(idx) {
		p.Distinct = append(p.Distinct, "")
	}
	start := len(p.dbuf)
	p.dbuf = k.appendDistinct(p.dbuf, value)
	m := string(p.dbuf[start:])
	if p.Distinct[idx] != "" && p.Distinct[idx] != m {
		return &Error{Check: i, Window: -1, Reason: "checks sharing a key (same scope, limiter and subject) count different distinct values"}
	}
	if p.Distinct[idx] == "" {
		p.NDistinct++
	}
	p.Distinct[idx] = m
	return nil
}

// IsDistinct reports whether key k counts a distinct value.
func (p *Plan) IsDistinct(k int) bool {
	return p.NDistinct > 0 && k < len(p.Distinct) && p.Distinct[k] != ""
}

// HeldAt reports whether window m held the request's distinct value
// before a decision of Redis.
func (p *Plan) HeldAt(m int32) bool { return p.NDistinct > 0 && int(m) < len(p.Held) && p.Held[m] }

// maxDistinctWindows bounds the windows of a distinct key, whose reply
// holds one bit per window: the rule language's bound.
const maxDistinctWindows = rulelimits.MaxDistinctWindows
