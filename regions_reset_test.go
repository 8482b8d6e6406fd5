package slidelimit_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/slidelimit/slidelimit/internal/redistest"
)

// TestRegionsResetPublic checks Limiter.Reset under regions through the
// public API, on three redis-servers 5-10 ms apart: a user blocked in
// every region (a full window's block, replicated) is admitted again in
// every region within the lag of a reset made in eu; a regions:local
// group's reset lifts eu only.
func TestRegionsResetPublic(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		rules string
		local bool
	}{
		{"user:5/10s; block:1m", false},
		{"user:5/10s; block:1m; regions:local", true},
	} {
		t.Run(tc.rules, func(t *testing.T) {
			g := startRegionsRig(t, tc.rules, 5*time.Millisecond, 10*time.Millisecond)
			// Every region denies: the limit taken, a block started and
			// replicated (or, regional, each region's own).
			redistest.Eventually(t, "every region denies", func() bool {
				denied := 0
				for r := range regionNames {
					if !g.ask(r) {
						denied++
					}
				}
				return denied == len(regionNames)
			})
			time.Sleep(100 * time.Millisecond) // the blocks have reached every region
			for r := range regionNames {
				if g.ask(r) {
					t.Fatalf("region %d admits after denying", r)
				}
			}
			start := time.Now()
			if err := g.lims[1][0].Reset(ctx, "api", "user", "u", false); err != nil {
				t.Fatal(err)
			}
			if tc.local {
				if !g.ask(1) {
					t.Error("eu denies after its reset")
				}
				time.Sleep(200 * time.Millisecond) // a replicated reset would have arrived
				for _, r := range []int{0, 2} {
					if g.ask(r) {
						t.Errorf("a regional reset in eu lifted region %d", r)
					}
				}
				return
			}
			for r := range regionNames {
				redistest.Eventually(t, "region "+strconv.Itoa(r)+" admits after eu's reset", func() bool { return g.ask(r) })
			}
			took := time.Since(start)
			t.Logf("every region admits %v after the reset", took.Round(time.Millisecond))
			if took > time.Second {
				t.Errorf("the reset reached every region after %v; the lag is 10-20 ms a round trip", took)
			}
		})
	}
}
