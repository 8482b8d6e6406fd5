package engine

import (
	"context"
	"strconv"
	"testing"

	"github.com/slidelimit/slidelimit/internal/redistest"
	"github.com/slidelimit/slidelimit/rules"
)

// manyKeys returns a request within the rule language's bounds
// (rulelimits.MaxRules, rulelimits.MaxWindows) with as many keys as windows: 40
// checks of an in-flight window, a rate window and three calendar windows
// (five keys each), then a check with a cost, whose rate key is the 201st.
func manyKeys() Request {
	req := Request{Scope: "s"}
	for i := range 40 {
		g := rules.MustParse("header(X-H" + strconv.Itoa(i) + "):1 concurrent,2/min,2/calendar day,2/calendar week,2/calendar month")
		req.Checks = append(req.Checks, Check{Rule: g.Rules[0], Subject: "a"})
	}
	g := rules.MustParse("user[tokens]:100/min")
	return Request{Scope: "s", Checks: append(req.Checks, Check{Rule: g.Rules[0], Subject: "a", Cost: 10})}
}

// TestManyKeys decides and settles requests of 201 keys on one Redis and
// on a Cluster. Settling one used to panic (a [2 * maxChecks] array
// indexed by key), and on a Cluster the keys past the 64th were sent
// twice (a uint64 of done keys), counting the request twice there.
func TestManyKeys(t *testing.T) {
	t.Parallel()
	for name, client := range map[string]func(t *testing.T) Client{
		"redis":   func(t *testing.T) Client { return redistest.Start(t).Client() },
		"cluster": func(t *testing.T) Client { return redistest.StartCluster(t).Client(t) },
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			e := newEngine(t, client(t), WithKeyPrefix(redistest.Prefix(t)))
			ctx := context.Background()
			req := manyKeys()
			actual := make([]int64, len(req.Checks))
			for i := range actual {
				actual[i] = -1 // kept as charged
			}
			actual[len(actual)-1] = 5
			var got []bool
			for range 3 {
				d, err := e.Allow(ctx, req)
				if err != nil {
					t.Fatal(err)
				}
				got = append(got, d.Allowed)
				if d.Allowed {
					if err := e.Finish(ctx, d, Outcome{Actual: actual}); err != nil {
						t.Fatalf("Finish: %v", err)
					}
				}
			}
			if got[0] != true || got[1] != true || got[2] != false {
				t.Errorf("three requests under limits of 2: allowed %v, want [true true false]", got)
			}
			d, err := e.peek(ctx, Request{Scope: "s", Checks: req.Checks[len(req.Checks)-1:]})
			if err != nil {
				t.Fatal(err)
			}
			if used := d.Windows[0].Used; used != 10 {
				t.Errorf("the cost check holds %d after two settlements to 5, want 10", used)
			}
		})
	}
}
