package slidelimit_test

import (
	"fmt"
	"os"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/slidelimit/slidelimit/internal/faults"
	"github.com/slidelimit/slidelimit/internal/redistest"
)

// regionsHarnessCaps are the real regions' runs: 4 s, links of 30-80 ms
// each way, and a region's Redis restarted empty (servers without
// persistence) or killed and restarted with its data (servers with an
// append-only file synced at every write).
var regionsHarnessCaps = faults.RegionCaps{Regions: 3, Duration: 4 * time.Second,
	MinLag: 30 * time.Millisecond, MaxLag: 80 * time.Millisecond, RestartEmpty: true}

// TestRegionsHarness runs generated plans (internal/faults.GenerateRegions:
// partitions, lag spikes, a region's Redis killed, restarted empty or with
// its data, a reset of the subject in one region) on three real regions
// through the public API, and checks every window of the admissions
// against the bound of docs/regions.md, counting after a reset only the
// admissions not made before it.
// SLIDELIMIT_REGIONS_SEED runs one seed of each kind of servers instead.
func TestRegionsHarness(t *testing.T) {
	empty, kept := []uint64{3, 6}, []uint64{11} // every kind of fault among them
	if s := os.Getenv("SLIDELIMIT_REGIONS_SEED"); s != "" {
		n, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatal(err)
		}
		empty, kept = []uint64{n}, []uint64{n}
	}
	withData := regionsHarnessCaps
	withData.RestartEmpty, withData.Kill = false, true
	blocks := []uint64{5} // a partition and a restart empty; a block starts
	// A reset in the second half, under even traffic above the limit:
	// seeds 0 (a lag spike) and 21 (a restart empty). Peers
	// that dropped every entry for 10 s after a floor broke both.
	withReset, resets := regionsHarnessCaps, []uint64{0, 21}
	withReset.Reset = true
	if s := os.Getenv("SLIDELIMIT_REGIONS_SEED"); s != "" {
		blocks, resets = empty, empty
	}
	for _, tc := range []struct {
		name  string
		caps  faults.RegionCaps
		seeds []uint64
		extra []string
		block bool // the rule blocks at its first denial, for longer than the run
	}{
		{"empty", regionsHarnessCaps, empty, nil, false},
		{"kept", withData, kept, []string{"--appendonly", "yes", "--appendfsync", "always"}, false},
		{"block", regionsHarnessCaps, blocks, nil, true},
		{"reset", withReset, resets, nil, false},
	} {
		for _, seed := range tc.seeds {
			t.Run(fmt.Sprintf("%s/%d", tc.name, seed), func(t *testing.T) {
				t.Parallel() // each scenario its own servers and links
				p := faults.GenerateRegions(seed, tc.caps)
				rule := fmt.Sprintf("user:%d/%dms; fail:closed", p.Limit, p.Window.Milliseconds())
				if tc.block {
					rule += fmt.Sprintf("; block:%ds", regionsBlock)
				}
				rs := redistest.StartRegionsWith(t, len(regionNames), p.MinLag, p.MaxLag, tc.extra...)
				g := startRegionsOn(t, rule, rs, 1)
				if tc.block {
					g.blockAfter = regionsBlock / 2
				}
				done := make(chan struct{})
				go func() { defer close(done); g.drive(p.Rates, p.Duration) }()
				runRegionFaults(g, p)
				<-done
				c := p.CheckRegionsResets(g.admissions(), g.resetCalls(), regionsSlack)
				if c.MaxOver > 0 {
					t.Errorf("%v\nthe bound of docs/regions.md failed: %s", p, c.Violation)
				}
				if tc.block {
					if len(g.blocks()) == 0 {
						t.Errorf("%v\nno request was blocked", p)
					}
					if v := p.CheckBlock(g.admissions(), g.blocks(), regionsBlock*time.Second, regionsSlack); v != "" {
						t.Errorf("%v\nthe block did not hold the regions it reached: %s", p, v)
					}
				}
				t.Logf("%v\n%d admitted; most in a window %d; resets %v", p, len(g.admissions()), c.MaxInWindow, g.resetCalls())
			})
		}
	}
}

// regionsBlock is the block (s) of the harness's block scenarios: longer
// than a run, so that the first block holds to its end.
const regionsBlock = 10

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
		case faults.RegionReset:
			if s.start {
				g.reset(f.Region)
			}
		case faults.RegionRestartEmpty, faults.RegionKill:
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
