package faults

// settledFirst returns h with the give-backs the engine ignores undone: a
// request settles once, and a settled request is not given back as well
// (docs/rules.md, Settlement; lua/multi_window.lua renames a settled entry
// so that a removal finds nothing, and a calendar counter is not given
// back after a settlement). The harness marks every give-back it attempts,
// so a Redis admission settled before its give-back is marked given back
// too (a give-back cannot come first: it ends the admission). The
// give-back stands when the settlement changed nothing (an actual cost
// equal to the cost: no settlement runs, and the give-back removes the
// entry), and when either call failed (Unsure: the queued settlement may
// run after the give-back, or never).
func settledFirst(h History) History {
	var ds []Decision
	for i, d := range h.Decisions {
		if d.Source != Redis || !d.Allowed || !d.GivenBack || !d.Settled || d.Unsure || d.Actual == max(d.Cost, 1) {
			continue
		}
		if ds == nil {
			ds = append([]Decision(nil), h.Decisions...)
		}
		ds[i].GivenBack = false
	}
	if ds != nil {
		h.Decisions = ds
	}
	return h
}
