package engine

import (
	"github.com/slidelimit/slidelimit/engine/internal/codec"
	"github.com/slidelimit/slidelimit/engine/internal/plan"
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
// distinctUndo makes u, the undo of distinct key k of p, the restore of
// its value: nothing (prev 0) when the op did not count the value anew or
// its reply was not read (a failed call: the value stays counted, erring
// on the side of denying).
func distinctUndo(p *plan.Plan, u *codec.Undo, k int) {
	u.Kind = codec.KindDistinct
	if k < len(p.DistinctPrev) && p.DistinctPrev[k] > 0 {
		u.Value, u.At, u.Prev = p.Distinct[k], p.DistinctAt[k], p.DistinctPrev[k]
	}
}
