package engine

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/slidelimit/slidelimit/internal/redistest"
	"github.com/slidelimit/slidelimit/rules"
)

// TestFallbackSeedDistinct kills a real Redis (SIGKILL) after a subject
// counted distinct values and checks that the FailLocal fallback starts
// from what Redis last said, as for other keys (TestFallbackSeedWindows,
// TestFallbackSeedCost): a subject with all L values of a window gets no
// new value, one with k gets at most L-k. The fallback knows the count of
// values, not which they are, so it counts requests: it admits exactly
// L-k new values, never more. A byte quota of the same request is seeded
// too (it was not stored either when the request counted values).
func TestFallbackSeedDistinct(t *testing.T) {
	t.Parallel()
	type step struct {
		at    time.Duration
		n     int // requests of n new values
		allow int // how many of them are admitted
	}
	for _, tc := range []struct {
		name         string
		wins         []rules.Window
		bytes        bool // a byte quota of 100 per minute beside, each request costing 10
		before, down []step
	}{
		{"full", []rules.Window{win(10, time.Minute)}, false,
			[]step{{0, 10, 10}}, []step{{time.Second, 10, 0}}},
		{"4 of 10", []rules.Window{win(10, time.Minute)}, false,
			[]step{{0, 4, 4}}, []step{{time.Second, 10, 6}}},
		// At 2 min the minute holds 4 of the hour's 9 values: the other 5
		// are seeded one minute before the answer, out of the minute.
		{"minute and hour", []rules.Window{win(5, time.Minute), win(12, time.Hour)}, false,
			[]step{{0, 5, 5}, {2 * time.Minute, 4, 4}},
			[]step{{2*time.Minute + time.Second, 3, 1}, {3*time.Minute + 2*time.Second, 5, 2}}},
		// The byte quota (70 of 100 used) is what denies here.
		{"byte quota beside", []rules.Window{win(10, time.Minute)}, true,
			[]step{{0, 7, 7}}, []step{{time.Second, 10, 3}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := redistest.Start(t)
			rc := redis.NewClient(&redis.Options{Addr: s.Addr, MaxRetries: -1})
			t.Cleanup(func() { rc.Close() })
			clk := redistest.NewClock()
			e := newEngine(t, rc, WithKeyPrefix(redistest.Prefix(t)), WithClock(clk.Now), WithTimeout(2*time.Second),
				WithFailMode(rules.FailLocal))
			value := 0
			r := func() Request {
				value++
				u := user("alice", tc.wins...)
				u.Distinct = fmt.Sprintf("/files/%d", value)
				if tc.bytes {
					return req(u, bytesOf("alice", 10, win(100, time.Minute)))
				}
				return req(u)
			}
			for i, st := range append(tc.before, tc.down...) {
				if i == len(tc.before) {
					s.Kill()
				}
				clk.Set(st.at)
				allowed := 0
				for range st.n {
					d, err := e.Allow(context.Background(), r())
					if i < len(tc.before) {
						if err != nil || !d.Allowed || d.Source != "redis" {
							t.Fatalf("step %d before the outage: %+v, %v", i, d, err)
						}
					} else if d.Source != "local" || !errors.Is(err, ErrBackend) {
						t.Fatalf("step %d with Redis down: %+v, %v; want a local decision", i, d, err)
					}
					if d.Allowed {
						allowed++
					}
				}
				if allowed != st.allow {
					t.Errorf("step %d at %v: %d of %d new values admitted, want %d", i, st.at, allowed, st.n, st.allow)
				}
			}
		})
	}
}

// TestFallbackSeedDistinctCluster is TestFallbackSeedDistinct's full case
// on a 3-master cluster whose master of the subject's key is SIGKILLed:
// the demo's /files (distinct:path) admitted 20 against 10 there, with two
// processes. Both engines counted values, then heard from Redis that the
// subject is full, and admit no new value with the master down.
func TestFallbackSeedDistinctCluster(t *testing.T) {
	t.Parallel()
	cl := redistest.StartCluster(t)
	opts := &redis.ClusterOptions{ContextTimeoutEnabled: true, DialerRetries: 1, MaxRetries: -1}
	prefix := redistest.Prefix(t)
	var engines []*Engine
	for node := range int64(2) {
		engines = append(engines, newEngine(t, cl.ClientWith(t, opts), WithKeyPrefix(prefix), WithNode(node+1),
			WithFailMode(rules.FailLocal)))
	}
	value := 0
	r := func() Request {
		value++
		u := user("alice", win(10, time.Minute))
		u.Distinct = fmt.Sprintf("/files/%d", value)
		return req(u)
	}
	ctx := context.Background()
	for i := range 10 {
		mustAllow(t, engines[i%2], r(), true)
	}
	for _, e := range engines {
		mustAllow(t, e, r(), false) // each hears from Redis that it is full
	}
	cl.KillMasterOf(t, engines[0].keyOf("s", r().Checks[0]))
	for ei, e := range engines {
		allowed := 0
		for range 10 {
			d, err := e.Allow(ctx, r())
			if d.Source != "local" || !errors.Is(err, ErrBackend) {
				t.Fatalf("engine %d with the master killed: %+v, %v; want a local decision", ei, d, err)
			}
			if d.Allowed {
				allowed++
			}
		}
		if allowed > 0 {
			t.Errorf("engine %d: %d new values admitted with the master killed, want 0 (10 of 10 held)", ei, allowed)
		}
	}
}
