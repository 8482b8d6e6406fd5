package engine

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/slidelimit/slidelimit/engine/internal/codec"
	"github.com/slidelimit/slidelimit/internal/redistest"
)

// TestFallbackConcurrentAnswers checks that the local fallback starts from
// the highest count among answers to calls that were in flight together:
// Redis may have decided them in any order, so the answer stored last
// (sent last, or sent at the same instant, as under a test clock) is not
// the one Redis decided last, and a process that heard a subject was full
// got one more locally (found by TestFaults, seed 11 on miniredis and
// Redis: a held distinct value's answer, 2 of 3, stored after a new
// value's, 3 of 3, decided after it). An answer sent after the others
// arrived was decided after them: it alone counts.
func TestFallbackConcurrentAnswers(t *testing.T) {
	t.Parallel()
	type answer struct {
		before     int64 // used before the request, as the script replies
		held       bool  // the window held the request's value (distinct)
		sent, recv int64 // µs before the fallback's decision
	}
	for _, tc := range []struct {
		name       string
		distinct   bool
		answers    []answer // in the order they arrive
		invalidate bool     // a give-back of this process after them
		allow      int      // of 3 local requests of new values
	}{
		// Seed 11: the new value's answer (3 of 3) first, the held value's
		// (2 of 3, decided before it) last, both at the same instant.
		{"distinct held value same instant", true,
			[]answer{{2, false, 10, 10}, {2, true, 10, 10}}, false, 0},
		{"count same instant", false,
			[]answer{{2, false, 10, 10}, {1, false, 10, 10}}, false, 0},
		// The full answer was sent first and arrives last: Redis decided
		// it after the other, sent later on another connection.
		{"count sent first arrives last", false,
			[]answer{{1, false, 8, 6}, {2, false, 10, 2}}, false, 0},
		{"count sent later decided first", false,
			[]answer{{2, false, 10, 6}, {1, false, 8, 2}}, false, 0},
		// A give-back (an invalidation) keeps what the process heard.
		{"invalidated after", true,
			[]answer{{2, false, 10, 10}, {2, true, 10, 10}}, true, 0},
		// Sent after the full answer arrived: decided after it, 2 of 3
		// (an entry left meanwhile), so 1 more.
		{"later answer", false,
			[]answer{{2, false, 10, 8}, {1, false, 6, 4}}, false, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			addr := redistest.RefusedAddr // nothing listens: every call goes to the fallback
			rc := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
			t.Cleanup(func() { rc.Close() })
			clk := redistest.NewClock()
			e := newEngine(t, rc, WithClock(clk.Now), WithLogger(discardLog))
			value := 0
			r := func() Request {
				c := user("u", win(3, 10*time.Second))
				if tc.distinct {
					value++
					c.Distinct = fmt.Sprint("v", value)
				}
				return req(c)
			}
			now := clk.Now().UnixMicro()
			for _, a := range tc.answers {
				c := getCall()
				rq := r()
				if err := buildPlan(&c.plan, e.keyer, &rq); err != nil {
					t.Fatal(err)
				}
				c.prepare()
				c.mode = opAllow
				c.status, c.res = codec.StatusAdmitted, []int64{a.before, 5_000_000, 0}
				if tc.distinct {
					c.plan.Held = append(c.plan.Held[:0], a.held)
				}
				storeKnown(e.known, c, now-a.sent, now-a.recv, now)
				putCall(c)
			}
			if tc.invalidate {
				e.known.Invalidate(e.keyOf("s", r().Checks[0]), now)
			}
			allowed := 0
			for range 3 {
				d, _ := e.Allow(context.Background(), r())
				if d.Source != "local" {
					t.Fatalf("decided by %v, want local", d.Source)
				}
				if d.Allowed {
					allowed++
				}
			}
			if allowed != tc.allow {
				t.Fatalf("the fallback admitted %d of 3, want %d", allowed, tc.allow)
			}
		})
	}
}
