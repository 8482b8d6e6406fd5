package engine

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/slidelimit/slidelimit/engine/internal/plan"
	"github.com/slidelimit/slidelimit/internal/redistest"
	"github.com/slidelimit/slidelimit/rules"
)

// distinctReq is user:3/min; user[bytes]:100k/min; distinct:path for a
// request of path costing 10,000 bytes.
func distinctReq(path string) Request {
	return distinctCost(path, 10_000)
}

// distinctCost is distinctReq for a request costing cost bytes.
func distinctCost(path string, cost int64) Request {
	u := user("u", win(3, time.Minute))
	u.Distinct = path
	return req(u, bytesOf("u", cost, win(100_000, time.Minute)))
}

// TestDistinct runs the distinct scenario on real Redis, miniredis, a
// 3-master cluster and a Ring, with and without cached denials: five
// requests for one path and two for other paths are admitted, a fourth
// distinct path is refused, the byte quota counts every admitted request,
// and values age out of the window as requests do.
func TestDistinct(t *testing.T) {
	t.Parallel()
	for _, b := range testBackends(t) {
		if b.name == "local" {
			continue // the fallback counts requests, not values (see Check.Distinct)
		}
		for _, cached := range []bool{false, true} {
			t.Run(b.name+cacheName(cached), func(t *testing.T) {
				t.Parallel()
				prefix := redistest.Prefix(t)
				if b.ttl != nil {
					b.ttl(t, prefix)
				}
				clk := redistest.NewClock()
				e := newEngine(t, b.c, WithKeyPrefix(prefix), WithClock(clk.Now), WithCachedDenials(cached))
				distinctScenario(t, e, clk)
			})
		}
	}
}

func distinctScenario(t *testing.T, e *Engine, clk *redistest.Clock) {
	t.Helper()
	ctx := context.Background()
	steps := []struct {
		at          time.Duration
		path        string
		allow       bool
		paths, byts int64 // what the windows report
		retry       time.Duration
	}{
		{0, "/a", true, 1, 10_000, 0},
		{time.Second, "/a", true, 1, 20_000, 0},
		{2 * time.Second, "/a", true, 1, 30_000, 0},
		{3 * time.Second, "/b", true, 2, 40_000, 0},
		{4 * time.Second, "/a", true, 2, 50_000, 0},
		{5 * time.Second, "/c", true, 3, 60_000, 0},
		{6 * time.Second, "/a", true, 3, 70_000, 0},
		{7 * time.Second, "/b", true, 3, 80_000, 0},
		{8 * time.Second, "/d", false, 3, 80_000, 52 * time.Second}, // a fourth path: /a leaves at 60 s
		{9 * time.Second, "/c", true, 3, 90_000, 0},
		{60 * time.Second, "/d", true, 3, 90_000, 0}, // /a has left, and the first 10,000 bytes
		{61 * time.Second, "/a", false, 3, 80_000, 2 * time.Second},
		{63 * time.Second, "/a", true, 3, 70_000, 0}, // /b left: /a counts again
	}
	for i, s := range steps {
		clk.Set(s.at)
		d, err := e.Allow(ctx, distinctReq(s.path))
		if err != nil {
			t.Fatal(err)
		}
		if d.Allowed != s.allow || d.Windows[0].Used != s.paths || d.Windows[1].Used != s.byts || d.RetryAfter != s.retry {
			t.Fatalf("step %d (%s at %v): allowed %v, paths %d, bytes %d, retry %v; want %v %d %d %v",
				i, s.path, s.at, d.Allowed, d.Windows[0].Used, d.Windows[1].Used, d.RetryAfter, s.allow, s.paths, s.byts, s.retry)
		}
	}
	// A request the byte quota refuses counts its path nowhere, though
	// its path key (in another cluster slot, or Ring shard) admitted it
	// first: the rollback restores the path key.
	clk.Set(200 * time.Second)
	if d, err := e.Allow(ctx, distinctCost("/y", 10_000)); err != nil || !d.Allowed {
		t.Fatalf("/y: %+v, %v", d, err)
	}
	if d, err := e.Allow(ctx, distinctCost("/z", 95_000)); err != nil || d.Allowed || d.Windows[0].Used != 1 {
		t.Fatalf("/z over the byte quota: %+v, %v; want denied with one path counted", d, err)
	}
	clk.Set(201 * time.Second)
	if d, err := e.Allow(ctx, distinctCost("/y", 1)); err != nil || !d.Allowed || d.Windows[0].Used != 1 {
		t.Fatalf("/y again: %+v, %v; want one path counted: /z refused counts nowhere", d, err)
	}
	// An aged-out path counted anew, then refused, gets its old score
	// back: it still counts in no window, and counts again when admitted.
	clk.Set(261 * time.Second) // /y (200 s) left the minute
	if d, err := e.Allow(ctx, distinctCost("/w", 10_000)); err != nil || !d.Allowed {
		t.Fatalf("/w: %+v, %v", d, err)
	}
	if d, err := e.Allow(ctx, distinctCost("/y", 95_000)); err != nil || d.Allowed {
		t.Fatalf("/y over the byte quota: %+v, %v; want denied", d, err)
	}
	for _, p := range []string{"/p", "/q"} {
		if d, err := e.Allow(ctx, distinctCost(p, 1)); err != nil || !d.Allowed {
			t.Fatalf("%s after the refusal: %+v, %v; want admitted: /y counts nowhere", p, d, err)
		}
	}
}

// TestDistinctMember checks that a value is stored as a member derived
// from it: escaped as subjects are, hashed when subjects are.
func TestDistinctMember(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, hashed := range []bool{false, true} {
		_, rc := redistest.StartClient(t)
		prefix := redistest.Prefix(t)
		opts := []Option{WithKeyPrefix(prefix)}
		if hashed {
			opts = append(opts, WithHashedSubjects([]byte("secret")))
		}
		e := newEngine(t, rc, opts...)
		if _, err := e.Allow(ctx, distinctReq("/files/report 1.pdf")); err != nil {
			t.Fatal(err)
		}
		var members []string
		for _, k := range scanKeys(t, rc, prefix) {
			if !strings.Contains(k, "bytes") {
				members, _ = rc.ZRange(ctx, k, 0, -1).Result()
			}
		}
		var value string
		for _, m := range members {
			if strings.HasPrefix(m, plan.DistinctPrefix) {
				value = m
			}
		}
		switch {
		case value == "":
			t.Fatalf("hashed %v: no value member in %q", hashed, members)
		case hashed && strings.Contains(value, "report"):
			t.Errorf("hashed subjects store the raw value %q", value)
		case !hashed && value != "v:/files/report%201.pdf":
			t.Errorf("member %q, want v:/files/report%%201.pdf", value)
		}
	}
}

// TestDistinctRequestErrors: a distinct value needs a count key.
func TestDistinctRequestErrors(t *testing.T) {
	t.Parallel()
	_, mc := redistest.Mini(t)
	e := newEngine(t, mc)
	c := bytesOf("u", 5, win(10, time.Minute))
	c.Distinct = "/a"
	if _, err := e.Allow(context.Background(), req(c)); err == nil {
		t.Error("distinct value in a cost limiter accepted")
	}
	g := user("u", rules.Window{Limit: 10, Period: time.Hour, Grain: time.Minute})
	g.Distinct = "/a"
	if _, err := e.Allow(context.Background(), req(g)); err == nil {
		t.Error("distinct value in a grained limiter accepted")
	}
}
