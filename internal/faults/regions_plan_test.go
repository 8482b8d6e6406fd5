package faults

import (
	"reflect"
	"slices"
	"testing"
	"time"
)

// modelCaps are the links, 30-80 ms each way, on runs of 20 s.
var modelCaps = RegionCaps{Regions: 3, Duration: 20 * time.Second, MinLag: 30 * time.Millisecond,
	MaxLag: 80 * time.Millisecond, Kill: true, RestartEmpty: true}

func TestGenerateRegions(t *testing.T) {
	t.Parallel()
	kinds := map[RegionFaultKind]int{}
	for seed := range uint64(200) {
		p := GenerateRegions(seed, modelCaps)
		if q := GenerateRegions(seed, modelCaps); !reflect.DeepEqual(p, q) {
			t.Fatalf("seed %d gave two plans:\n%v\n%v", seed, p, q)
		}
		if len(p.Rates) != 3 || p.Limit < 1 || p.Window <= 0 || p.Window > p.Duration || len(p.Faults) == 0 {
			t.Fatalf("a bad plan: %v", p)
		}
		for i, f := range p.Faults {
			kinds[f.Kind]++
			if f.At < 0 || f.For <= 0 || f.end() > p.Duration+p.Window || f.Region < 0 || f.Region >= 3 ||
				i > 0 && f.At < p.Faults[i-1].At || f.Kind == RegionLagSpike && f.Lag <= p.MaxLag {
				t.Fatalf("a bad fault %v in %v", f, p)
			}
		}
		// With a reset: the same plan, and one reset in the second half.
		withReset := modelCaps
		withReset.Reset = true
		q := GenerateRegions(seed, withReset)
		var resets []RegionFault
		q.Faults = slices.DeleteFunc(q.Faults, func(f RegionFault) bool {
			if f.Kind == RegionReset {
				resets = append(resets, f)
			}
			return f.Kind == RegionReset
		})
		if !reflect.DeepEqual(p, q) || len(resets) != 1 || resets[0].For != 0 ||
			resets[0].At < p.Duration/2 || resets[0].At > p.Duration*3/4 {
			t.Fatalf("seed %d with a reset %v: %v, without %v", seed, resets, q, p)
		}
		kinds[RegionReset]++
		noKill := modelCaps
		noKill.Kill, noKill.RestartEmpty = false, false
		for _, f := range GenerateRegions(seed, noKill).Faults {
			if f.Kind == RegionKill || f.Kind == RegionRestartEmpty {
				t.Fatalf("seed %d: %v without Kill", seed, f)
			}
		}
	}
	for k := range numRegionFaults {
		if kinds[k] == 0 {
			t.Errorf("no %v in 200 plans", k)
		}
	}
}

// TestCheckRegions checks the checker on admissions made by hand.
func TestCheckRegions(t *testing.T) {
	t.Parallel()
	p := RegionsPlan{Limit: 3, Window: time.Second, Duration: 5 * time.Second, MinLag: 30 * time.Millisecond, MaxLag: 50 * time.Millisecond,
		Batch: 10 * time.Millisecond, Rates: []float64{1, 1, 1}}
	at := func(r int, ms int) RegionAdmission {
		return RegionAdmission{Region: r, At: time.Duration(ms) * time.Millisecond}
	}
	answered := func(r, sent, done int) RegionAdmission {
		a := at(r, sent)
		a.Done = time.Duration(done) * time.Millisecond
		return a
	}
	tests := []struct {
		name   string
		faults []RegionFault
		adm    []RegionAdmission
		max    int64
		over   bool
	}{
		{"within the limit", nil, []RegionAdmission{at(0, 0), at(1, 100), at(2, 200), at(0, 1100)}, 3, false},
		// Each admission reached every peer before the next was made.
		{"over, everything seen", nil, []RegionAdmission{at(0, 0), at(1, 100), at(2, 200), at(0, 300), at(1, 400)}, 5, true},
		// Sent within a second, but the last answered past it: it may have
		// been made more than a window after the first.
		{"answered late", nil, []RegionAdmission{at(0, 0), at(0, 300), at(0, 600), answered(0, 990, 1010)}, 3, false},
		{"answered in time", nil, []RegionAdmission{at(0, 0), at(0, 300), at(0, 600), answered(0, 990, 995)}, 4, true},
		// Admissions at one moment are not stable yet: no region may
		// have counted another's.
		{"together", nil, []RegionAdmission{at(0, 500), at(1, 500), at(2, 500)}, 3, false},
		{"one more", nil, []RegionAdmission{at(0, 0), at(0, 500), at(1, 500), at(2, 500)}, 4, true},
		// Region 0's admission, made before region 1's, reached region 1
		// only after region 1 admitted, and was stable when region 2's
		// was made: region 1 may add ⌈1/3⌉.
		{"unseen", nil, []RegionAdmission{at(0, 0), at(1, 40), at(2, 90), at(2, 95)}, 4, false},
		{"unseen, one more", nil, []RegionAdmission{at(0, 0), at(1, 40), at(2, 90), at(2, 95), at(2, 96)}, 5, true},
		// A cut holds region 0's admissions from the others until it
		// heals: nothing of it is stable, and the others did not see it.
		{"a cut", []RegionFault{{Kind: RegionPartition, Region: 0, At: 0, For: 600 * time.Millisecond}},
			[]RegionAdmission{at(0, 0), at(1, 300), at(2, 300)}, 3, false},
		{"a cut, one more", []RegionFault{{Kind: RegionPartition, Region: 0, At: 0, For: 600 * time.Millisecond}},
			[]RegionAdmission{at(0, 0), at(0, 100), at(1, 300), at(2, 300)}, 4, true},
		// Region 1 forgot its two admissions when its Redis restarted empty.
		{"forgotten", []RegionFault{{Kind: RegionRestartEmpty, Region: 1, At: 250 * time.Millisecond, For: 50 * time.Millisecond}},
			[]RegionAdmission{at(1, 0), at(1, 100), at(0, 200), at(1, 400), at(1, 500)}, 5, false},
	}
	for _, tt := range tests {
		p.Faults = tt.faults
		c := p.CheckRegions(tt.adm, 0)
		if c.MaxInWindow != tt.max || (c.MaxOver > 0) != tt.over {
			t.Errorf("%s: most in a window %d, over by %d (%s); want %d, over %v", tt.name, c.MaxInWindow, c.MaxOver,
				c.Violation, tt.max, tt.over)
		}
	}
}

// TestRegionsHarnessModel runs generated plans, with partitions, lag
// spikes and regions' Redis killed or restarted empty, on the model: the
// theorem holds wherever it applies, and so does the bound computed from
// outside, which check (b) is needed for.
func TestRegionsHarnessModel(t *testing.T) {
	t.Parallel()
	naiveOver := 0
	for seed := range uint64(40) {
		p := GenerateRegions(seed, modelCaps)
		s := p.Sim()
		r := run(t, s)
		if r.MaxOver > 0 {
			t.Fatalf("%v\nthe theorem failed: %s", p, r.Violation)
		}
		if c := p.CheckRegions(r.Admissions, 0); c.MaxOver > 0 || c.MaxInWindow != r.MaxInWindow {
			t.Fatalf("%v\nthe bound from outside failed: %s (most in a window %d, the model's %d)", p, c.Violation,
				c.MaxInWindow, r.MaxInWindow)
		}
		s.Naive = true
		if c := p.CheckRegions(run(t, s).Admissions, 0); c.MaxOver > 0 {
			naiveOver++
		}
	}
	if naiveOver == 0 {
		t.Error("without check (b) no plan broke the bound: the harness cannot tell")
	}
	t.Logf("without check (b), %d of 40 plans broke the bound", naiveOver)
}

// TestCheckBlock checks the block property on runs made by hand: a block
// answered at 100-105 ms in region 0 reaches every region by the lag
// bound (50 ms, a 10 ms batch), and holds them to its end.
func TestCheckBlock(t *testing.T) {
	t.Parallel()
	p := RegionsPlan{Limit: 3, Window: time.Second, Duration: 5 * time.Second, MinLag: 30 * time.Millisecond,
		MaxLag: 50 * time.Millisecond, Batch: 10 * time.Millisecond, Rates: []float64{1, 1, 1}}
	ms := func(n int) time.Duration { return time.Duration(n) * time.Millisecond }
	adm := func(r, sent, done int) RegionAdmission {
		return RegionAdmission{Region: r, At: ms(sent), Done: ms(done)}
	}
	blocked := []RegionAdmission{adm(0, 100, 105), adm(1, 300, 301)}
	for _, tc := range []struct {
		name   string
		faults []RegionFault
		adm    []RegionAdmission
		bad    bool
	}{
		{"before it reached the region", nil, []RegionAdmission{adm(1, 150, 151), adm(0, 90, 99)}, false},
		{"after it reached the region", nil, []RegionAdmission{adm(2, 200, 201)}, true},
		{"in the region that blocked", nil, []RegionAdmission{adm(0, 170, 171)}, true},
		{"after its end", nil, []RegionAdmission{adm(2, 1200, 1201)}, false},
		{"cut off until after", []RegionFault{{Kind: RegionPartition, Region: 2, At: 0, For: ms(800)}},
			[]RegionAdmission{adm(2, 700, 701)}, false},
		{"cut off, healed", []RegionFault{{Kind: RegionPartition, Region: 2, At: 0, For: ms(800)}},
			[]RegionAdmission{adm(2, 900, 901)}, true},
		{"restarted empty", []RegionFault{{Kind: RegionRestartEmpty, Region: 2, At: ms(400), For: ms(100)}},
			[]RegionAdmission{adm(2, 600, 601)}, false},
		// Cut off until 80 ms: the links to it may pause until 250 ms
		// (twice the cut and a batch) before their next batch.
		{"healed, the link pausing", []RegionFault{{Kind: RegionPartition, Region: 2, At: 0, For: ms(80)}},
			[]RegionAdmission{adm(2, 200, 201)}, false},
		{"healed, the link's pause over", []RegionFault{{Kind: RegionPartition, Region: 2, At: 0, For: ms(80)}},
			[]RegionAdmission{adm(2, 400, 401)}, true},
	} {
		p.Faults = tc.faults
		if v := p.CheckBlock(tc.adm, blocked, time.Second, 0); (v != "") != tc.bad {
			t.Errorf("%s: %q, want a violation %v", tc.name, v, tc.bad)
		}
	}
}

// TestCheckRegionsResets checks that after a reset a window counts only
// the admissions not surely made before it: two before and two after a
// reset fit a limit of 2; one answered during the reset's call counts.
func TestCheckRegionsResets(t *testing.T) {
	t.Parallel()
	ms := func(n int) time.Duration { return time.Duration(n) * time.Millisecond }
	p := RegionsPlan{Limit: 2, Window: time.Second, Duration: 2 * time.Second, Rates: []float64{1}}
	adm := []RegionAdmission{{At: ms(100)}, {At: ms(200)}, {At: ms(600)}, {At: ms(700)}}
	reset := []RegionAdmission{{At: ms(500), Done: ms(510)}}
	if c := p.CheckRegions(adm, 0); c.MaxOver != 2 {
		t.Errorf("without the reset: over by %d, want 2", c.MaxOver)
	}
	if c := p.CheckRegionsResets(adm, reset, 0); c.MaxOver > 0 || c.MaxInWindow != 2 {
		t.Errorf("with the reset: most %d, over by %d; want 2 and none: %s", c.MaxInWindow, c.MaxOver, c.Violation)
	}
	during := append(slices.Clone(adm), RegionAdmission{At: ms(490), Done: ms(505)})
	if c := p.CheckRegionsResets(during, reset, 0); c.MaxOver != 1 {
		t.Errorf("an admission answered during the reset: over by %d, want 1", c.MaxOver)
	}
}
