package faults

import (
	"fmt"
	"math/rand/v2"
	"time"
)

// RegionShare is region r's share of a headroom among R regions,
// ⌊(max(h, 0) + r) / R⌋; the R shares of h sum to max(h, 0) (Hermite's
// identity). See docs/regions.md, The rule.
func RegionShare(r, regions int, headroom int64) int64 {
	if headroom < 0 {
		headroom = 0
	}
	return (headroom + int64(r)) / int64(regions)
}

// RegionsBound is the theorem of docs/regions.md: the most a window of
// limit holds across regions, given its stable admissions and, for each
// region holding unstable ones, the stable peer admissions it had not
// received at its last admission.
func RegionsBound(regions int, limit, stable int64, unseen []int64) int64 {
	b := max(limit, stable)
	for _, n := range unseen {
		b += (n + int64(regions) - 1) / int64(regions)
	}
	return b
}

// RegionCut cuts Region off from every other region during [From, To).
type RegionCut struct {
	Region   int
	From, To time.Duration
}

// RegionsSim is a model of regions under the rule of docs/regions.md, on a
// millisecond clock: each region decides alone on what it has received;
// its admissions reach each peer in batches after a lag, the peer's
// acknowledgement comes back after another, and a cut holds both until it
// heals. It checks the theorem's bound at every millisecond.
type RegionsSim struct {
	Limit            int64
	Window, Duration time.Duration
	// Batch is the replicator's interval: an admission leaves at the next
	// multiple of it.
	Batch          time.Duration
	MinLag, MaxLag time.Duration // one way, drawn per message
	// Rates are each region's requests per second; len(Rates) is the
	// number of regions.
	Rates []float64
	Cuts  []RegionCut
	// Naive drops check (b): each region checks only its own view, as
	// regions counting alone with replication would.
	Naive bool
	Seed  uint64
}

// RegionsResult is what a simulation saw.
type RegionsResult struct {
	Admitted    int   // admissions in the whole run
	Requests    int   // requests in the whole run
	MaxInWindow int64 // the most admissions any window held
	// MaxOver is the most a window held beyond its bound (<= 0 when the
	// bound held everywhere); Violation describes the first excess.
	MaxOver   int64
	Violation string
}

// simAdmission is one admission: where and when it was made, when each
// region received it, and when its region knew every peer had.
type simAdmission struct {
	region   int
	at       int64
	recvAt   []int64 // per region; -1 until received; its own region's is at
	acks     int
	stableAt int64 // -1 until stable
}

type simEvent struct {
	ack bool // an acknowledgement reaching a.region, else a reaching to
	a   *simAdmission
	to  int
}

// Run runs the simulation.
func (s RegionsSim) Run() (RegionsResult, error) {
	regions := len(s.Rates)
	if regions < 2 || s.Limit < 1 || s.Window < time.Millisecond || s.Batch < time.Millisecond ||
		s.MinLag < 0 || s.MaxLag < s.MinLag {
		return RegionsResult{}, fmt.Errorf("faults: regions simulation: bad parameters %+v", s)
	}
	rng := rand.New(rand.NewPCG(s.Seed, s.Seed^0x9e3779b97f4a7c15))
	ms := func(d time.Duration) int64 { return d.Milliseconds() }
	end, window, batch := ms(s.Duration), ms(s.Window), ms(s.Batch)
	events := make([][]simEvent, end+1)
	cutAt := func(r int, t int64) (bool, int64) {
		for _, c := range s.Cuts {
			if c.Region == r && ms(c.From) <= t && t < ms(c.To) {
				return true, ms(c.To)
			}
		}
		return false, 0
	}
	// arrival is when a message sent from a to b at t arrives, leaving at
	// the next batch when batched: a cut of either end while it travels
	// sends it again when the cut heals.
	var arrival func(a, b int, t int64, batched bool) int64
	arrival = func(a, b int, t int64, batched bool) int64 {
		for {
			if batched && t%batch != 0 {
				t += batch - t%batch
			}
			lag := ms(s.MinLag)
			if s.MaxLag > s.MinLag {
				lag += rng.Int64N(ms(s.MaxLag) - ms(s.MinLag) + 1)
			}
			healed := int64(-1)
			for x := t; x <= t+lag; x++ {
				for _, r := range []int{a, b} {
					if cut, to := cutAt(r, x); cut {
						healed = max(healed, to)
					}
				}
				if healed >= 0 {
					break
				}
			}
			if healed < 0 {
				return t + lag
			}
			t = healed
		}
	}
	// schedule queues e at at, and never at the current millisecond, whose
	// events are being handled.
	schedule := func(at, now int64, e simEvent) {
		at = max(at, now+1)
		if at <= end {
			events[at] = append(events[at], e)
		}
	}

	var (
		res  RegionsResult
		all  []*simAdmission // in order of at
		last = make([]int64, regions)
	)
	for i := range last {
		last[i] = -1
	}
	for t := int64(0); t <= end; t++ {
		for _, e := range events[t] {
			if e.ack {
				e.a.acks++
				if e.a.acks == regions-1 {
					e.a.stableAt = t
				}
				continue
			}
			e.a.recvAt[e.to] = t
			schedule(arrival(e.to, e.a.region, t, false), t, simEvent{ack: true, a: e.a})
		}
		events[t] = nil
		// Drop what left the window.
		from := 0
		for from < len(all) && all[from].at <= t-window {
			from++
		}
		all = all[from:]
		for r := range regions {
			if rng.Float64() >= s.Rates[r]/1000 {
				continue
			}
			res.Requests++
			var v, u int64
			for _, a := range all {
				switch {
				case a.region == r:
					v++
					if a.stableAt < 0 {
						u++
					}
				case a.recvAt[r] >= 0:
					v++
				}
			}
			if v+1 > s.Limit || !s.Naive && u+1 > RegionShare(r, regions, s.Limit-(v-u)) {
				continue
			}
			a := &simAdmission{region: r, at: t, recvAt: make([]int64, regions), stableAt: -1}
			for p := range a.recvAt {
				a.recvAt[p] = -1
				if p != r {
					schedule(arrival(r, p, t, true), t, simEvent{a: a, to: p})
				}
			}
			a.recvAt[r] = t
			all = append(all, a)
			last[r] = t
			res.Admitted++
		}
		s.check(t, all, last, &res)
	}
	return res, nil
}

// check compares the window ending at t with the theorem's bound.
func (s RegionsSim) check(t int64, all []*simAdmission, last []int64, res *RegionsResult) {
	regions := len(s.Rates)
	var total, stable int64
	unstable := make([]int64, regions)
	for _, a := range all {
		total++
		if a.stableAt >= 0 {
			stable++
		} else {
			unstable[a.region]++
		}
	}
	res.MaxInWindow = max(res.MaxInWindow, total)
	var unseen []int64
	for r := range regions {
		if unstable[r] == 0 {
			continue
		}
		var n int64
		for _, a := range all {
			if a.region != r && a.stableAt >= 0 && a.recvAt[r] > last[r] {
				n++
			}
		}
		unseen = append(unseen, n)
	}
	bound := RegionsBound(regions, s.Limit, stable, unseen)
	over := total - bound
	res.MaxOver = max(res.MaxOver, over)
	if over > 0 && res.Violation == "" {
		res.Violation = fmt.Sprintf("at %dms the window held %d, bound %d (stable %d, unseen %v)", t, total, bound, stable, unseen)
	}
}
