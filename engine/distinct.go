package engine

import (
	"github.com/slidelimit/slidelimit/engine/internal/codec"
	"github.com/slidelimit/slidelimit/engine/internal/plan"
)

// Distinct values (Check.Distinct) are planned in internal/plan (see its
// distinct.go); what stays here is their restore after a rollback.

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
