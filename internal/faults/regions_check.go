package faults

import (
	"fmt"
	"slices"
	"time"
)

// RegionAdmission is one admission as seen from outside the regions: the
// region that made it, and when, from the run's start.
type RegionAdmission struct {
	Region int
	At     time.Duration
}

// RegionsCheck is what CheckRegions found.
type RegionsCheck struct {
	MaxInWindow int64 // the most admissions any window held
	// MaxOver is the most a window held beyond its bound (<= 0 when the
	// bound held everywhere); Violation describes the first excess.
	MaxOver   int64
	Violation string
}

// CheckRegions checks every window of the admissions of a run of plan
// against the bound of docs/regions.md, computed from outside: from the
// admissions' regions and times and the plan's faults alone. For the
// window (t-W, t] ending at an admission, it is
//
//	L + F + Σ_r ⌈N_r / R⌉
//
// over the regions r that admitted in the window, t_r the last of them,
// where N_r counts the window's admissions of r's peers that may not have
// reached r at t_r, and F the window's admissions that their own region
// forgot (made before its Redis restarted empty). An admission made at x
// reaches a peer by x plus the lag bound (the links' most, or a spike's,
// plus the batch interval and slack, the time a loaded machine adds);
// one that a cut or a Redis down holds, by the lag bound after that ends;
// and a region restarted empty at y receives its peers' windows by y plus
// the lag bound. These are the theorem's terms made larger: the stable
// admissions N_r counts are among these, and a region holding unstable
// admissions at t is among those that admitted in the window.
func (p RegionsPlan) CheckRegions(adm []RegionAdmission, slack time.Duration) RegionsCheck {
	adm = slices.Clone(adm)
	slices.SortStableFunc(adm, func(a, b RegionAdmission) int { return int(a.At - b.At) })
	tl := p.timeline(adm, slack)
	var res RegionsCheck
	from := 0
	for i, a := range adm {
		t := a.At
		for adm[from].At <= t-p.Window {
			from++
		}
		// Every admission at t is in its window: take the last of them.
		if i+1 < len(adm) && adm[i+1].At == t {
			continue
		}
		total := int64(i + 1 - from)
		bound, terms := p.windowBound(adm, tl, from, i, t)
		res.MaxInWindow = max(res.MaxInWindow, total)
		over := total - bound
		res.MaxOver = max(res.MaxOver, over)
		if over > 0 && res.Violation == "" {
			res.Violation = fmt.Sprintf("the window ending at %v held %d, bound %d (unseen %v)", t, total, bound, terms)
		}
	}
	return res
}

// never is a time no run reaches.
const never = time.Duration(1<<63 - 1)

// admTimes are what the checker knows of one admission from the plan.
type admTimes struct {
	reach       []time.Duration // by region: the latest it reaches it
	stableFrom  time.Duration   // the earliest it may be stable
	stableBy    time.Duration   // the latest it is stable, never if lost
	forgottenAt time.Duration   // when its own region forgot it, never if not
}

// timeline computes each admission's times.
func (p RegionsPlan) timeline(adm []RegionAdmission, slack time.Duration) []admTimes {
	regions := len(p.Rates)
	tl := make([]admTimes, len(adm))
	for i, a := range adm {
		x := admTimes{reach: make([]time.Duration, regions), forgottenAt: never}
		for _, f := range p.Faults {
			if f.Kind == RegionRestartEmpty && f.Region == a.Region && a.At < f.At {
				x.forgottenAt = min(x.forgottenAt, f.At)
			}
		}
		for r := range regions {
			if r == a.Region {
				continue
			}
			x.reach[r] = p.reach(a, r, slack)
			back := never
			if x.reach[r] != never {
				back = p.latest(r, a.Region, x.reach[r], slack)
			}
			x.stableBy = max(x.stableBy, back)
			x.stableFrom = max(x.stableFrom, p.earliest(r, a.Region, p.earliest(a.Region, r, a.At)))
		}
		tl[i] = x
	}
	return tl
}

// windowBound is the bound of the window adm[from:to+1], ending at t, and
// each busy region's N_r.
func (p RegionsPlan) windowBound(adm []RegionAdmission, tl []admTimes, from, to int, t time.Duration) (int64, []int64) {
	regions := int64(len(p.Rates))
	bound := p.Limit
	busy := make([]bool, regions)
	last := make([]time.Duration, regions)
	for j := from; j <= to; j++ {
		b, x := adm[j], tl[j]
		last[b.Region] = b.At
		switch {
		case x.forgottenAt <= t:
			bound++ // F
		case x.stableBy > t:
			busy[b.Region] = true
		}
	}
	var terms []int64
	for r := range busy {
		if !busy[r] {
			continue
		}
		var n int64
		for j := from; j <= to; j++ {
			if adm[j].Region != r && tl[j].stableFrom <= t && tl[j].reach[r] > last[r] {
				n++
			}
		}
		terms = append(terms, n)
		bound += (n + regions - 1) / regions
	}
	return bound, terms
}

// lagBound is the longest one-way trip of a message sent at t.
func (p RegionsPlan) lagBound(t, slack time.Duration) time.Duration {
	lag := p.MaxLag
	for _, f := range p.Faults {
		if f.Kind == RegionLagSpike && f.At <= t && t < f.end() {
			lag = max(lag, f.Lag)
		}
	}
	return lag + p.Batch + slack
}

// reach is the latest admission a reaches region r: never when it is
// lost with its region's log.
func (p RegionsPlan) reach(a RegionAdmission, r int, slack time.Duration) time.Duration {
	at := p.latest(a.Region, r, a.At, slack)
	for _, f := range p.Faults {
		switch {
		case f.Kind == RegionRestartEmpty && f.Region == a.Region && a.At < f.At && at > f.At:
			return never
		case f.Kind == RegionRestartEmpty && f.Region == r && a.At < f.end():
			// Its peers send their windows again.
			at = max(at, f.end()+p.lagBound(f.end(), slack))
		}
	}
	return at
}

// latest is the latest a message from region from to region to, sent at
// t, arrives: a fault of either end that holds it holds it until it ends.
func (p RegionsPlan) latest(from, to int, t, slack time.Duration) time.Duration {
	at := t + p.lagBound(t, slack)
	for changed := true; changed; {
		changed = false
		for _, f := range p.Faults {
			if f.Kind == RegionLagSpike || f.Region != from && f.Region != to {
				continue
			}
			if f.At < at && f.end() > t {
				if next := f.end() + p.lagBound(f.end(), slack); next > at {
					at, changed = next, true
				}
			}
		}
	}
	return at
}

// earliest is the earliest a message from region from to region to, sent
// at t, may arrive: after the links' least lag, and not before a fault of
// either end that is on at t ends.
func (p RegionsPlan) earliest(from, to int, t time.Duration) time.Duration {
	for _, f := range p.Faults {
		if f.Kind != RegionLagSpike && (f.Region == from || f.Region == to) && f.At <= t && t < f.end() {
			t = f.end()
		}
	}
	return t + p.MinLag
}
