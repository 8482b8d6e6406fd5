package faults

import (
	"fmt"
	"slices"
	"time"
)

// RegionAdmission is one admission as seen from outside the regions: the
// region that made it, and when, from the run's start: at At, or, when
// Done is set, between At (the request was sent) and Done (its answer
// came back).
type RegionAdmission struct {
	Region int
	At     time.Duration
	Done   time.Duration `json:",omitempty"`
}

// done is the latest a was made.
func (a RegionAdmission) done() time.Duration { return max(a.At, a.Done) }

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
// admissions' regions and times and the plan's faults alone. An admission
// known only to lie between its At and Done counts in a window when it
// surely lies within it. For the window (t-W, t] ending at an admission,
// it is
//
//	L + Σ_r F_r + Σ_r ⌈N_r / R⌉
//
// F_r counts the window's admissions made before region r's Redis last
// restarted empty (by t): r forgot them, its own and what it had
// received, and no peer sends them again, so r may admit them once more,
// as a single Redis that restarts empty does. N_r, for a region r with an
// admission in the window that may still be unacknowledged at t (t_r its
// last), counts the window's other admissions of r's peers that may be
// stable at t (two least lags after they were made, or after a fault
// holding either end then ends) and may not have reached r at t_r: a
// message sent at x arrives by x plus the lag bound (the links' most, or
// a spike's, plus the batch interval and slack, the time a loaded machine
// adds), or by the lag bound after a cut or a Redis down holding it ends.
// These are the theorem's terms made larger, never smaller.
func (p RegionsPlan) CheckRegions(adm []RegionAdmission, slack time.Duration) RegionsCheck {
	return p.CheckRegionsResets(adm, nil, slack)
}

// CheckRegionsResets is CheckRegions for a run with resets of the subject
// (RegionReset): resets are the Limiter.Reset calls, each between its At
// (sent) and Done (answered). A reset's floor is the resetting region's
// clock during the call, and every region then counts only the admissions
// made after it (docs/regions.md, Reset across regions): the theorem
// holds for those alone, since the entries before the floor only lower
// the share a region sees until the reset reaches it. So a window ending
// at t, once a reset was sent by t, counts, and bounds, only the
// admissions not surely made before it (answered before the call was
// sent); those made during the call count, which makes the check weaker
// by at most them, never wrong.
func (p RegionsPlan) CheckRegionsResets(adm, resets []RegionAdmission, slack time.Duration) RegionsCheck {
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
		// Count those surely made within one window: sent after the
		// latest answer of the window less a window.
		first, late := from, t
		for j := from; j <= i; j++ {
			late = max(late, adm[j].done())
		}
		for adm[first].At <= late-p.Window {
			first++
		}
		cut := time.Duration(-1) // admissions answered before it are reset
		for _, r := range resets {
			if r.At <= t {
				cut = max(cut, r.At)
			}
		}
		total := int64(0)
		for j := first; j <= i; j++ {
			if adm[j].done() >= cut {
				total++
			}
		}
		bound, terms := p.windowBound(adm, tl, first, i, t, cut)
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
	reach      []time.Duration // by region: the latest it reaches it
	stableFrom time.Duration   // the earliest it may be stable
	stableBy   time.Duration   // the latest it is stable
}

// timeline computes each admission's times.
func (p RegionsPlan) timeline(adm []RegionAdmission, slack time.Duration) []admTimes {
	regions := len(p.Rates)
	tl := make([]admTimes, len(adm))
	for i, a := range adm {
		x := admTimes{reach: make([]time.Duration, regions)}
		for r := range regions {
			if r == a.Region {
				continue
			}
			x.reach[r] = p.reach(a, r, slack)
			x.stableBy = max(x.stableBy, p.latest(r, a.Region, p.latest(a.Region, r, a.At, slack), slack))
			x.stableFrom = max(x.stableFrom, p.earliest(r, a.Region, p.earliest(a.Region, r, a.At)))
		}
		tl[i] = x
	}
	return tl
}

// windowBound is the bound of the window adm[from:to+1], ending at t, and
// each busy region's N_r, over the admissions answered at or after cut
// (those before a reset that cut them out of the window).
func (p RegionsPlan) windowBound(adm []RegionAdmission, tl []admTimes, from, to int, t, cut time.Duration) (int64, []int64) {
	regions := int64(len(p.Rates))
	bound := p.Limit
	busy := make([]bool, regions)
	last := make([]time.Duration, regions)
	for j := from; j <= to; j++ {
		if adm[j].done() < cut {
			continue
		}
		last[adm[j].Region] = adm[j].At
		if tl[j].stableBy > t {
			busy[adm[j].Region] = true
		}
	}
	var terms []int64
	for r := range regions {
		// F: what region r forgot, its own and what it had received,
		// when its Redis restarted empty.
		forgot := time.Duration(-1)
		for _, f := range p.Faults {
			if f.Kind == RegionRestartEmpty && int64(f.Region) == r && f.At <= t {
				forgot = max(forgot, f.At)
			}
		}
		var n int64
		for j := from; j <= to; j++ {
			switch {
			case adm[j].done() < cut:
			case adm[j].At < forgot:
				bound++
			case busy[r] && int64(adm[j].Region) != r && tl[j].stableFrom <= t && tl[j].reach[r] > last[r]:
				n++
			}
		}
		if busy[r] {
			terms = append(terms, n)
			bound += (n + regions - 1) / regions
		}
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

// reach is the latest admission a reaches region r: never when r's Redis
// may have received it and then restarted empty (no peer sends it again).
func (p RegionsPlan) reach(a RegionAdmission, r int, slack time.Duration) time.Duration {
	for _, f := range p.Faults {
		if f.Kind == RegionRestartEmpty && f.Region == r && a.At < f.At {
			return never
		}
	}
	return p.latest(a.Region, r, a.At, slack)
}

// latest is the latest a message from region from to region to, sent at
// t, arrives: a fault of either end that holds it holds it until it ends.
func (p RegionsPlan) latest(from, to int, t, slack time.Duration) time.Duration {
	at := t + p.lagBound(t, slack)
	for changed := true; changed; {
		changed = false
		for _, f := range p.Faults {
			if f.Kind == RegionLagSpike || f.Kind == RegionReset || f.Region != from && f.Region != to {
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

// RetryBackoff is the longest pause of a replicator's link to a peer
// after a failed batch (internal/regions, backoff): the pause doubles from
// the batch interval on each failure, so once a fault of either end is
// over, the link's next batch may wait up to twice the fault's length
// plus a batch, and no longer than RetryBackoff.
const RetryBackoff = time.Second

// latestRetried is latest, allowing for the link's retry pause after a
// fault of either end that ended by t (RetryBackoff): a message sent then
// leaves with the link's next batch.
func (p RegionsPlan) latestRetried(from, to int, t, slack time.Duration) time.Duration {
	at := p.latest(from, to, t, slack)
	for _, f := range p.Faults {
		if f.Kind == RegionLagSpike || f.Kind == RegionReset || f.Region != from && f.Region != to || f.end() > t {
			continue
		}
		if resume := f.end() + min(2*(f.end()-f.At)+p.Batch, RetryBackoff); resume > t {
			at = max(at, resume+p.lagBound(resume, slack))
		}
	}
	return at
}

// earliest is the earliest a message from region from to region to, sent
// at t, may arrive: after the links' least lag, and not before a fault of
// either end that is on at t ends.
func (p RegionsPlan) earliest(from, to int, t time.Duration) time.Duration {
	for _, f := range p.Faults {
		if f.Kind != RegionLagSpike && f.Kind != RegionReset && (f.Region == from || f.Region == to) && f.At <= t && t < f.end() {
			t = f.end()
		}
	}
	return t + p.MinLag
}

// CheckBlock checks a run whose rule blocks a subject for block at its
// first denial by a full window (block: longer than the run) against the
// promise of docs/regions.md: a block started in one region holds every
// region the replication reaches. blocked are the requests answered as
// blocked (between At and Done). The earliest answered began the first
// block, at a decision no later than its answer and no earlier than the
// earliest of them was sent: from the latest a message from any region
// sent at that answer arrives at region j (the links' lag bound, any
// fault holding it, and the link's retry pause after one), until that
// earliest send plus block, j admits
// nothing; unless j's Redis restarted empty meanwhile, which forgets the
// block. It returns the first admission that breaks it, or "".
func (p RegionsPlan) CheckBlock(adm, blocked []RegionAdmission, block, slack time.Duration) string {
	if len(blocked) == 0 {
		return ""
	}
	first, from := blocked[0], blocked[0].At
	for _, b := range blocked {
		if b.done() < first.done() {
			first = b
		}
		from = min(from, b.At)
	}
	end := from + block
	reach := make([]time.Duration, len(p.Rates)) // by region: the latest the block arrives
	for j := range reach {
		for r := range p.Rates {
			reach[j] = max(reach[j], p.latestRetried(r, j, first.done(), slack))
		}
	}
	for _, a := range adm {
		if a.At < reach[a.Region] || a.done() >= end {
			continue
		}
		forgot := false
		for _, f := range p.Faults {
			forgot = forgot || f.Kind == RegionRestartEmpty && f.Region == a.Region && f.At > from && f.At < a.done()
		}
		if !forgot {
			return fmt.Sprintf("region %d admitted at %v-%v, after the block answered at %v-%v (region %d) reached it by %v",
				a.Region, a.At, a.done(), first.At, first.done(), first.Region, reach[a.Region])
		}
	}
	return ""
}
