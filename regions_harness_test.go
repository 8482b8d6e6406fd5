package slidelimit_test

import (
	"fmt"
	"os"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/slidelimit/slidelimit/internal/faults"
)

// regionsHarnessCaps are the real regions' runs: 4 s, links of 30-80 ms
// each way, and a region's Redis restarted empty (redistest's servers keep
// no data across a restart).
var regionsHarnessCaps = faults.RegionCaps{Regions: 3, Duration: 4 * time.Second,
	MinLag: 30 * time.Millisecond, MaxLag: 80 * time.Millisecond, RestartEmpty: true}

// TestRegionsHarness runs generated plans (internal/faults.GenerateRegions:
// partitions, lag spikes, a region's Redis restarted empty) on three real
// regions through the public API, and checks every window of the
// admissions against the bound of docs/regions.md. SLIDELIMIT_REGIONS_SEED
// runs one seed instead.
func TestRegionsHarness(t *testing.T) {
	seeds := []uint64{3, 6} // every kind of fault among them
	if s := os.Getenv("SLIDELIMIT_REGIONS_SEED"); s != "" {
		n, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatal(err)
		}
		seeds = []uint64{n}
	}
	for _, seed := range seeds {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			p := faults.GenerateRegions(seed, regionsHarnessCaps)
			rule := fmt.Sprintf("user:%d/%dms; fail:closed", p.Limit, p.Window.Milliseconds())
			g := startRegionsRig(t, rule, p.MinLag, p.MaxLag)
			done := make(chan struct{})
			go func() { defer close(done); g.drive(p.Rates, p.Duration) }()
			runRegionFaults(g, p)
			<-done
			c := p.CheckRegions(g.admissions(), regionsSlack)
			if c.MaxOver > 0 {
				t.Errorf("%v\nthe bound of docs/regions.md failed: %s", p, c.Violation)
			}
			t.Logf("%v\n%d admitted; most in a window %d", p, len(g.admissions()), c.MaxInWindow)
		})
	}
}

// regionStep is one change of the links or servers at a time of a run.
type regionStep struct {
	at    time.Duration
	fault faults.RegionFault
	start bool
}

// runRegionFaults applies the plan's faults to the rig at their times,
// on the test's goroutine, and returns when the last has ended. Faults of
// one kind on one region nest: a region is cut (or down) while any is on.
func runRegionFaults(g *regionsRig, p faults.RegionsPlan) {
	var steps []regionStep
	for _, f := range p.Faults {
		steps = append(steps, regionStep{f.At, f, true}, regionStep{f.At + f.For, f, false})
	}
	slices.SortStableFunc(steps, func(a, b regionStep) int { return int(a.at - b.at) })
	cut := make([]int, len(p.Rates))
	down := make([]int, len(p.Rates))
	var spikes []time.Duration
	for _, s := range steps {
		time.Sleep(time.Until(g.start.Add(s.at)))
		f := s.fault
		switch f.Kind {
		case faults.RegionPartition:
			if s.start {
				if cut[f.Region]++; cut[f.Region] == 1 {
					g.rs.Cut(f.Region)
				}
			} else if cut[f.Region]--; cut[f.Region] == 0 {
				g.rs.Heal(f.Region)
			}
		case faults.RegionLagSpike:
			if s.start {
				spikes = append(spikes, f.Lag)
			} else {
				spikes = slices.Delete(spikes, slices.Index(spikes, f.Lag), slices.Index(spikes, f.Lag)+1)
			}
			g.rs.SetDelay(p.MinLag, max(p.MaxLag, slices.Max(append(spikes, 0))))
		case faults.RegionRestartEmpty:
			if s.start {
				if down[f.Region]++; down[f.Region] == 1 {
					g.rs.Servers[f.Region].Kill()
				}
			} else if down[f.Region]--; down[f.Region] == 0 {
				g.rs.Servers[f.Region].Restart()
			}
		}
	}
}
