package faults

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"time"
)

// RegionFaultKind is what a fault of a regions plan does.
type RegionFaultKind uint8

// Kinds of region faults.
const (
	// RegionPartition cuts Region off from every other region.
	RegionPartition RegionFaultKind = iota
	// RegionLagSpike raises every link's one-way lag to up to Lag.
	RegionLagSpike
	// RegionKill stops Region's Redis; it comes back with its data.
	RegionKill
	// RegionRestartEmpty stops Region's Redis; it comes back empty.
	RegionRestartEmpty
	// RegionReset resets the subject in Region (Limiter.Reset) at At; its
	// For is 0. It holds no link and no server.
	RegionReset
	numRegionFaults
)

var regionFaultNames = [numRegionFaults]string{"partition", "lag spike", "kill", "restart empty", "reset"}

func (k RegionFaultKind) String() string {
	if k < numRegionFaults {
		return regionFaultNames[k]
	}
	return fmt.Sprintf("region fault(%d)", k)
}

// RegionFault is one fault of a regions plan, during [At, At+For).
type RegionFault struct {
	Kind    RegionFaultKind
	Region  int           // not for RegionLagSpike
	At, For time.Duration // from the run's start
	Lag     time.Duration // RegionLagSpike: the one-way lag's new maximum
}

func (f RegionFault) String() string {
	switch f.Kind {
	case RegionLagSpike:
		return fmt.Sprintf("%v to %v at %v for %v", f.Kind, f.Lag, f.At, f.For)
	case RegionReset:
		return fmt.Sprintf("%v in region %d at %v", f.Kind, f.Region, f.At)
	}
	return fmt.Sprintf("%v of region %d at %v for %v", f.Kind, f.Region, f.At, f.For)
}

// end is when the fault ends.
func (f RegionFault) end() time.Duration { return f.At + f.For }

// RegionCaps says what a run of regions can do: how long it may be, and
// which faults its servers can take.
type RegionCaps struct {
	Regions  int           // 2 or more
	Duration time.Duration // the run's length
	// MinLag and MaxLag are the links' one-way lag without a spike.
	MinLag, MaxLag time.Duration
	// Kill: a region's Redis can be killed and restarted with its data;
	// RestartEmpty: killed and restarted empty.
	Kill, RestartEmpty bool
	// Reset adds one reset of the subject (RegionReset), in the run's
	// second half, after the other draws: a seed's other faults and
	// traffic are the same with or without it.
	Reset bool
}

// RegionsPlan is a generated run of regions: a limit per window for one
// subject, each region's request rate, and faults on a timeline.
type RegionsPlan struct {
	Seed             uint64
	Limit            int64
	Window, Duration time.Duration
	MinLag, MaxLag   time.Duration
	Batch            time.Duration // the replicator's interval
	Rates            []float64     // requests per second, per region
	Faults           []RegionFault // ordered by At
}

func (p RegionsPlan) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "seed %d: %d/%v, %d regions at %v req/s, lag %v-%v, batch %v, %v",
		p.Seed, p.Limit, p.Window, len(p.Rates), p.Rates, p.MinLag, p.MaxLag, p.Batch, p.Duration)
	for _, f := range p.Faults {
		fmt.Fprintf(&b, "\n  %v", f)
	}
	return b.String()
}

// GenerateRegions returns the plan of seed for caps: the same seed and
// caps always give the same plan. Its windows are a fifth to a third of
// the run, so that faults fall inside, across and between windows; its
// traffic is even, skewed or one region's, from half the limit's rate to
// five times it.
func GenerateRegions(seed uint64, caps RegionCaps) RegionsPlan {
	r := rand.New(rand.NewPCG(seed, 0x9e510))
	regions := max(caps.Regions, 2)
	p := RegionsPlan{
		Seed: seed, Limit: int64(10 + r.IntN(51)), Duration: caps.Duration,
		MinLag: caps.MinLag, MaxLag: caps.MaxLag, Batch: 10 * time.Millisecond,
	}
	p.Window = (caps.Duration / time.Duration(3+r.IntN(3))).Truncate(time.Millisecond)
	rate := float64(p.Limit) / p.Window.Seconds() * (0.5 + 4.5*r.Float64())
	p.Rates = make([]float64, regions)
	switch x := r.IntN(3); x {
	case 0: // even
		for i := range p.Rates {
			p.Rates[i] = rate / float64(regions)
		}
	case 1: // skewed: 90% in one region
		hot := r.IntN(regions)
		for i := range p.Rates {
			p.Rates[i] = rate * 0.1 / float64(regions-1)
		}
		p.Rates[hot] = rate * 0.9
	default: // one region only
		p.Rates[r.IntN(regions)] = rate
	}
	kinds := []RegionFaultKind{RegionPartition, RegionLagSpike}
	if caps.Kill {
		kinds = append(kinds, RegionKill)
	}
	if caps.RestartEmpty {
		kinds = append(kinds, RegionRestartEmpty)
	}
	for range 1 + r.IntN(3) {
		f := RegionFault{Kind: kinds[r.IntN(len(kinds))], Region: r.IntN(regions)}
		f.At = time.Duration(r.Int64N(int64(caps.Duration * 3 / 4)))
		f.For = time.Duration(int64(p.Window)/5 + r.Int64N(int64(p.Window)))
		switch f.Kind {
		case RegionLagSpike:
			f.Region = 0
			f.Lag = caps.MaxLag + time.Duration(100+r.IntN(300))*time.Millisecond
		case RegionKill, RegionRestartEmpty:
			f.For = min(f.For, p.Window/2)
		}
		f.At, f.For = f.At.Truncate(time.Millisecond), f.For.Truncate(time.Millisecond)
		p.Faults = append(p.Faults, f)
	}
	if caps.Reset {
		at := caps.Duration/2 + time.Duration(r.Int64N(int64(caps.Duration/4)))
		p.Faults = append(p.Faults, RegionFault{Kind: RegionReset, Region: r.IntN(regions), At: at.Truncate(time.Millisecond)})
	}
	slices.SortStableFunc(p.Faults, func(a, b RegionFault) int { return int(a.At - b.At) })
	return p
}

// Sim returns the model's run of the plan.
func (p RegionsPlan) Sim() RegionsSim {
	return RegionsSim{Limit: p.Limit, Window: p.Window, Duration: p.Duration, Batch: p.Batch,
		MinLag: p.MinLag, MaxLag: p.MaxLag, Rates: p.Rates, Faults: p.Faults, Seed: p.Seed}
}
