package engine

import (
	"context"
	"testing"
	"time"

	"github.com/slidelimit/slidelimit/internal/redistest"
	"github.com/slidelimit/slidelimit/internal/ruletime"
	"github.com/slidelimit/slidelimit/rules"
)

// TestFallbackReseedsSameTime: the local fallback starts from Redis's last
// answer even when it carries the same time as the answer it started from
// before (a test clock that stands still, or a wall clock stepped back).
// Found by TestFaults (redis, seed 5): a process that had seen a subject
// at 1 of 3 and admitted one locally, then saw it full from Redis at the
// same clock time, admitted it again locally in the next outage, since the
// fallback kept its seed of the older answer.
func TestFallbackReseedsSameTime(t *testing.T) {
	t.Parallel()
	m, _, e := miniEngine(t, rules.FailLocal)
	r := req(user("u", win(3, 10*time.Second)))
	allow := func(want bool, src source) {
		t.Helper()
		d, _ := e.Allow(context.Background(), r)
		if d.Allowed != want || d.Source != src.String() {
			t.Fatalf("Allow: allowed %v by %v, want %v by %v", d.Allowed, d.Source, want, src)
		}
	}
	allow(true, fromRedis) // Redis: 1 of 3
	m.Close()
	allow(true, fromLocal) // the fallback: 1 seen, 1 of its own
	if err := m.Restart(); err != nil {
		t.Fatal(err)
	}
	redistest.Eventually(t, "the engine sees Redis again", func() bool { return !e.doms.One.Down.Load() })
	allow(true, fromRedis) // Redis: 2 of 3
	allow(true, fromRedis) // Redis: 3 of 3, full, at the same time
	m.Close()
	allow(false, fromLocal) // this process saw it full: 0 more
}

// TestFallbackSeedAfterGiveBack: a give-back invalidates what the process
// knew of the subject (so no cached denial outlives the entry), but its
// fallback still starts from the last answer: k of L used gets at most
// L-k more. Found by TestFaults (miniredis, seed 5): after a give-back,
// an outage gave a subject this process had seen at 2 of 4 its whole
// limit again. The calendar case: a calendar window kept in its rate
// key's entry (see colocated) keeps the last answer there as the seed, and
// the fallback must start the calendar key from it too, not from 0. Found
// by TestFaults (redis, seed 3859122395231807178): a give-back that Redis
// ran when it woke from DEBUG SLEEP published its keys, and a process's
// fallback then admitted a calendar day's whole limit again.
func TestFallbackSeedAfterGiveBack(t *testing.T) {
	t.Parallel()
	for name, r := range map[string]Request{
		"window":   req(user("u", win(3, 10*time.Second))),
		"calendar": req(user("u", win(100, 10*time.Second), calWin(3, ruletime.Day))),
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			m, _, e := miniEngine(t, rules.FailLocal)
			ctx := context.Background()
			mustAllow(t, e, r, true)
			d := mustAllow(t, e, r, true) // Redis: 2 of 3
			if err := e.Finish(ctx, d, Outcome{GiveBack: true}); err != nil {
				t.Fatal(err)
			}
			m.Close() // Redis holds 1 of 3: at most 2 more here
			admitted := 0
			for range 5 {
				if d, _ := e.Allow(ctx, r); d.Allowed {
					if d.Source != "local" {
						t.Fatalf("admitted by %v, want local", d.Source)
					}
					admitted++
				}
			}
			if admitted > 2 {
				t.Fatalf("the fallback admitted %d with 1 of 3 used, want at most 2", admitted)
			}
		})
	}
}
