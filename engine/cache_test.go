package engine

import (
	"context"
	"errors"
	"net"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/slidelimit/slidelimit/engine/internal/codec"
	"github.com/slidelimit/slidelimit/internal/redistest"
	"github.com/slidelimit/slidelimit/internal/ruletime"
	"github.com/slidelimit/slidelimit/rules"
)

// waitTrusted waits until e's invalidation subscription is confirmed.
func waitTrusted(t *testing.T, e *Engine) {
	t.Helper()
	redistest.Eventually(t, "the invalidation subscription confirmed", func() bool {
		_, ok := e.known.Trusted(e.elapsed())
		return ok
	})
}

// TestCachedDenials fills a window and checks that the denials that follow
// cost no Redis command, come from the cache and say what Redis says.
func TestCachedDenials(t *testing.T) {
	t.Parallel()
	_, rc := redistest.StartClient(t)
	prefix := redistest.Prefix(t)
	afterTTLs(t, rc, prefix)
	hook := &redistest.CommandCounter{}
	rc.AddHook(hook)
	e := newEngine(t, rc, WithKeyPrefix(prefix))
	truth := newEngine(t, rc, WithKeyPrefix(prefix), WithCachedDenials(false))
	waitTrusted(t, e)
	r := req(ip("10.0.0.1", win(100, time.Hour)), user("alice", win(3, time.Minute), win(10, time.Hour)))
	for i := range 3 {
		mustAllow(t, e, r, true)
		_ = i
	}
	before := hook.Count()
	const n = 1000
	for i := range n {
		d, err := e.Allow(context.Background(), r)
		if err != nil || d.Allowed || d.Source != "cache" {
			t.Fatalf("denial %d: allowed %v source %v err %v; want a cached denial", i, d.Allowed, d.Source, err)
		}
	}
	if got := hook.Count() - before; got != 0 {
		t.Errorf("%d Redis commands for %d cached denials, want 0", got, n)
	}

	// What Redis says at the same moment, asked without the cache; a
	// loaded machine may stall between the two answers (measured: gap).
	asked := time.Now()
	cached, err := e.Allow(context.Background(), r)
	if err != nil {
		t.Fatal(err)
	}
	redisSays, err := truth.peek(context.Background(), r)
	gap := time.Since(asked)
	if err != nil || redisSays.Source != "redis" || redisSays.Allowed {
		t.Fatalf("Redis: %+v %v", redisSays, err)
	}
	if cached.Source != "cache" || cached.Allowed {
		t.Fatalf("cached: %+v", cached)
	}
	if cached.Denied == (WindowState{}) || redisSays.Denied == (WindowState{}) || cached.Denied != redisSays.Denied && cached.Denied.Window != redisSays.Denied.Window {
		t.Errorf("denying window: cache %+v, Redis %+v", cached.Denied, redisSays.Denied)
	}
	// The cached RetryAfter and Resets are measured from the answer's
	// arrival: never earlier than Redis's, later by at most a round trip
	// and the time between the two answers.
	near := func(what string, c, r time.Duration) {
		if c < r || c > r+50*ms+gap {
			t.Errorf("%s: cache %v, Redis %v; want the cache's within 50ms above (and %v between the answers)", what, c, r, gap)
		}
	}
	near("RetryAfter", cached.RetryAfter, redisSays.RetryAfter)
	for i := range cached.Windows {
		c, r := cached.Windows[i], redisSays.Windows[i]
		if c.Used != r.Used || c.Remaining != r.Remaining || c.Window != r.Window || c.Check != r.Check {
			t.Errorf("window %d: cache %+v, Redis %+v", i, c, r)
		}
		near("Reset", c.Reset, r.Reset)
	}
	if d := cached.Time.Sub(redisSays.Time); d > 50*ms || d < -50*ms-gap {
		t.Errorf("Time: cache %v, Redis %v (%v between the answers)", cached.Time, redisSays.Time, gap)
	}

	// A request with a key the cache has not seen asks Redis.
	other := req(ip("10.0.0.2", win(100, time.Hour)), user("alice", win(3, time.Minute), win(10, time.Hour)))
	if d, _ := e.Allow(context.Background(), other); d.Source != "redis" || d.Allowed {
		t.Errorf("unknown ip key: source %v allowed %v, want a Redis denial", d.Source, d.Allowed)
	}
}

// TestCachedDenialDeadline checks under a test clock that a cached denial
// ends exactly when Redis would admit again, not a microsecond later.
func TestCachedDenialDeadline(t *testing.T) {
	t.Parallel()
	_, rc := redistest.StartClient(t)
	prefix := redistest.Prefix(t)
	afterTTLs(t, rc, prefix)
	clk := redistest.NewClock()
	e := newEngine(t, rc, WithKeyPrefix(prefix), WithClock(clk.Now))
	waitTrusted(t, e)
	r := req(user("u", win(2, time.Second), win(3, 10*time.Second)))
	mustAllow(t, e, r, true)
	clk.Set(400 * ms)
	mustAllow(t, e, r, true)
	for _, at := range []time.Duration{400 * ms, 700 * ms, time.Second - time.Microsecond} {
		clk.Set(at)
		d, err := e.Allow(context.Background(), r)
		if err != nil || d.Allowed || d.Source != "cache" || d.RetryAfter != time.Second-at {
			t.Errorf("at %v: allowed %v source %v retry %v err %v; want a cached denial for %v",
				at, d.Allowed, d.Source, d.RetryAfter, err, time.Second-at)
		}
	}
	clk.Set(time.Second)
	if d, err := e.Allow(context.Background(), r); err != nil || !d.Allowed || d.Source != "redis" {
		t.Errorf("at 1s: allowed %v source %v err %v; want admitted by Redis", d.Allowed, d.Source, err)
	}
}

// TestCachedDenialInvalidation checks that a Reset or a GiveBack in
// another process reaches this process's cache within a second.
func TestCachedDenialInvalidation(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		ws   []rules.Window
	}{
		{"sliding", []rules.Window{win(2, time.Hour)}},
		// The calendar key is known in its rate key's cache entry.
		{"calendar", []rules.Window{win(100, time.Hour), {Limit: 2, Calendar: ruletime.Month}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			testCachedDenialInvalidation(t, rules.Rule{Kind: rules.User, Windows: tc.ws})
		})
	}
}

func testCachedDenialInvalidation(t *testing.T, l rules.Rule) {
	_, rc := redistest.StartClient(t)
	prefix := redistest.Prefix(t)
	afterTTLs(t, rc, prefix)
	a := newEngine(t, rc, WithKeyPrefix(prefix))
	b := newEngine(t, rc, WithKeyPrefix(prefix))
	waitTrusted(t, a)
	r := Request{Scope: "s", Checks: []Check{{Rule: l, Subject: "u"}}}
	fill := func() Decision {
		t.Helper()
		var last Decision
		for range 2 {
			last = mustAllow(t, b, r, true)
		}
		d, _ := a.Allow(context.Background(), r)
		if d.Allowed {
			t.Fatal("a: admitted a third request")
		}
		// The invalidation of a Reset just before may reach a after its
		// denial was cached and drop it (pub/sub is asynchronous; seen on
		// a loaded machine): a denial from Redis counts nothing and is
		// cached again, so ask until the cache answers.
		for start := time.Now(); ; time.Sleep(5 * ms) {
			d, _ := a.Allow(context.Background(), r)
			if d.Allowed {
				t.Fatal("a: admitted a third request")
			}
			if d.Source == "cache" {
				break
			}
			if time.Since(start) > 3*time.Second {
				t.Fatalf("a: source %v after a denial for 3s, want cache", d.Source)
			}
		}
		return last
	}
	freed := func(what string) {
		t.Helper()
		start := time.Now()
		for {
			d, _ := a.Allow(context.Background(), r)
			if d.Allowed {
				if el := time.Since(start); el > time.Second {
					t.Errorf("%s in b reached a's cache after %v, want < 1s", what, el)
				}
				return
			}
			if time.Since(start) > 3*time.Second {
				t.Fatalf("%s in b: a still denies after 3s (source %v)", what, d.Source)
			}
			time.Sleep(5 * ms)
		}
	}

	fill()
	if err := b.resetSubject(context.Background(), "s", l, "u"); err != nil {
		t.Fatal(err)
	}
	freed("Reset")

	if err := b.resetSubject(context.Background(), "s", l, "u"); err != nil {
		t.Fatal(err)
	}
	last := fill()
	if err := b.giveBack(context.Background(), r, last); err != nil {
		t.Fatal(err)
	}
	freed("GiveBack")
}

// TestFallbackRemembers kills Redis and checks that FailLocal starts from
// what Redis last said: a full subject stays denied, one with k of L used
// gets L-k more.
func TestFallbackRemembers(t *testing.T) {
	t.Parallel()
	s, rc := redistest.StartClient(t)
	prefix := redistest.Prefix(t)
	e := newEngine(t, rc, WithKeyPrefix(prefix), WithTimeout(200*ms), WithFailMode(rules.FailLocal))
	full := req(user("full", win(10, time.Minute), win(20, time.Hour)))
	part := req(user("part", win(10, time.Minute), win(20, time.Hour)))
	for range 10 {
		mustAllow(t, e, full, true)
	}
	for range 4 {
		mustAllow(t, e, part, true)
	}
	s.Kill()
	for i := range 5 {
		d, err := e.Allow(context.Background(), full)
		if d.Allowed || !errors.Is(err, ErrBackend) && d.Source != "cache" {
			t.Fatalf("full subject, call %d with Redis down: allowed %v source %v err %v", i, d.Allowed, d.Source, err)
		}
	}
	admitted := 0
	for range 20 {
		d, err := e.Allow(context.Background(), part)
		if d.Allowed {
			if d.Source != "local" || !errors.Is(err, ErrBackend) {
				t.Fatalf("admitted by %v (err %v) with Redis down", d.Source, err)
			}
			admitted++
		}
	}
	if admitted != 10-4 {
		t.Errorf("subject with 4 of 10 used: %d admitted with Redis down, want 6", admitted)
	}
}

// TestFallbackSeedWindows checks the seeds of a two-window key: the
// entries counted only by the long window stay out of the short one.
func TestFallbackSeedWindows(t *testing.T) {
	t.Parallel()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	rc := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
	t.Cleanup(func() { rc.Close() })
	clk := redistest.NewClock()
	e := newEngine(t, rc, WithClock(clk.Now))
	r := req(user("u", win(3, time.Second), win(10, time.Minute)))
	c := getCall()
	defer putCall(c)
	if err := buildPlan(&c.plan, e.keyer, &r); err != nil {
		t.Fatal(err)
	}
	c.prepare()
	// Redis said at t0: 8 entries in the minute, 1 of them in the second.
	c.status, c.mode = codec.StatusDenied, opPeek
	c.res = []int64{8, 30_000_000, 0, 1, 500_000, 0}
	now := clk.Now().UnixMicro()
	storeKnown(e.known, c, now, now, now)

	want := []struct {
		at      time.Duration
		allowed bool
	}{
		{0, true}, {0, true}, // the second window had 1 of 3
		{1 * ms, false}, // 3 of 3 in the second; 10 of 10 in the minute
		{1100 * ms, false},
		// The 7 entries only the minute counted sit at t0-1s: they leave
		// it at t0+59s, no earlier than the real ones.
		{59*time.Second - ms, false},
		{59 * time.Second, true},
	}
	for _, w := range want {
		clk.Set(w.at)
		d, _ := e.Allow(context.Background(), r)
		if d.Allowed != w.allowed || d.Source != "local" {
			t.Errorf("at %v: allowed %v source %v, want %v local", w.at, d.Allowed, d.Source, w.allowed)
		}
	}
}

// TestFallbackBoundProcesses checks the outage bound across processes:
// n engines that last saw k of L used admit at most n·(L-k) in all while
// Redis is down, and none for a subject that was full.
func TestFallbackBoundProcesses(t *testing.T) {
	t.Parallel()
	s := redistest.Start(t)
	// No retries: a refused connection fails at once, so the test does
	// not wait for a timeout per call.
	rc := redis.NewClient(&redis.Options{Addr: s.Addr, MaxRetries: -1})
	t.Cleanup(func() { rc.Close() })
	prefix := redistest.Prefix(t)
	const n, limit, used = 3, 10, 4
	var engines []*Engine
	for i := range n {
		engines = append(engines, newEngine(t, rc, WithKeyPrefix(prefix), WithNode(int64(i)), WithTimeout(200*ms)))
	}
	part := req(user("part", win(limit, time.Minute)))
	full := req(user("full", win(limit, time.Minute)))
	for i := range used {
		mustAllow(t, engines[i%n], part, true)
	}
	for i := range limit {
		mustAllow(t, engines[i%n], full, true)
	}
	for _, e := range engines { // every process learns the latest counts
		for _, r := range []Request{part, full} {
			if d, err := e.peek(context.Background(), r); err != nil || d.Source != "redis" {
				t.Fatalf("Peek: %v %v", d.Source, err)
			}
		}
	}
	s.Kill()
	total := 0
	for i, e := range engines {
		admitted := 0
		for range 2 * limit {
			if d, _ := e.Allow(context.Background(), part); d.Allowed {
				admitted++
			}
			if d, _ := e.Allow(context.Background(), full); d.Allowed {
				t.Fatalf("engine %d admitted the full subject with Redis down (source %v)", i, d.Source)
			}
		}
		if admitted != limit-used {
			t.Errorf("engine %d admitted %d with Redis down, want L-k = %d", i, admitted, limit-used)
		}
		total += admitted
	}
	t.Logf("%d engines admitted %d beyond the %d Redis counted, bound n(L-k) = %d", n, total, used, n*(limit-used))
}

// TestFallbackSeedCost kills Redis and checks that FailLocal starts keys
// counted in units from what Redis last said, as it does count keys: a
// byte quota with 700 of 1000 bytes used admits 300 more bytes, not 1000,
// in a sliding window and in a calendar month; of two windows, the bytes
// only the long one still counts stay out of the short one; a grained
// window with 7 of 10 used admits 3.
func TestFallbackSeedCost(t *testing.T) {
	t.Parallel()
	type step struct {
		at    time.Duration
		cost  int64
		allow bool
	}
	bytes := func(ws ...rules.Window) rules.Rule {
		return rules.Rule{Kind: rules.User, Cost: "bytes", Windows: ws}
	}
	ones := func(n int, at time.Duration, allow bool) []step {
		var s []step
		for range n {
			s = append(s, step{at, 1, allow})
		}
		return s
	}
	for _, tc := range []struct {
		name         string
		lim          rules.Rule
		before, down []step
	}{
		{"bytes per hour", bytes(win(1000, time.Hour)),
			[]step{{0, 400, true}, {ms, 300, true}},
			[]step{{time.Second, 301, false}, {time.Second, 300, true}, {time.Second, 1, false}}},
		{"bytes per calendar month", bytes(win(1_000_000, time.Hour), calWin(1000, ruletime.Month)),
			[]step{{0, 400, true}, {ms, 300, true}},
			[]step{{time.Second, 301, false}, {time.Second, 300, true}, {time.Second, 1, false}}},
		// At 2 min the minute holds 300 of the hour's 700: the other 400
		// are seeded one minute before the answer, out of the minute.
		{"bytes per minute and hour", bytes(win(500, time.Minute), win(1000, time.Hour)),
			[]step{{0, 400, true}, {2 * time.Minute, 300, true}},
			[]step{
				{2*time.Minute + time.Second, 201, false}, // the minute's 300 + 201 > 500
				{2*time.Minute + time.Second, 200, true},
				{3*time.Minute + 2*time.Second, 101, false}, // the hour's 900 + 101 > 1000
				{3*time.Minute + 2*time.Second, 100, true},
			}},
		{"grained count", rules.Rule{Kind: rules.User, Windows: []rules.Window{{Limit: 10, Period: time.Minute, Grain: 10 * time.Second}}},
			ones(7, 0, true), append(ones(3, time.Second, true), ones(1, time.Second, false)...)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := redistest.Start(t)
			rc := redis.NewClient(&redis.Options{Addr: s.Addr, MaxRetries: -1})
			t.Cleanup(func() { rc.Close() })
			clk := redistest.NewClock()
			e := newEngine(t, rc, WithKeyPrefix(redistest.Prefix(t)), WithClock(clk.Now), WithTimeout(200*ms),
				WithFailMode(rules.FailLocal))
			r := func(cost int64) Request {
				return Request{Scope: "s", Checks: []Check{{Rule: tc.lim, Subject: "alice", Cost: cost}}}
			}
			for i, st := range append(tc.before, tc.down...) {
				if i == len(tc.before) {
					s.Kill()
				}
				clk.Set(st.at)
				d, err := e.Allow(context.Background(), r(st.cost))
				if i < len(tc.before) {
					if err != nil || !d.Allowed || d.Source != "redis" {
						t.Fatalf("step %d (cost %d) before the outage: %+v, %v", i, st.cost, d, err)
					}
					continue
				}
				if d.Source != "local" || !errors.Is(err, ErrBackend) {
					t.Fatalf("step %d (cost %d) with Redis down: %+v, %v; want a local decision", i, st.cost, d, err)
				}
				if d.Allowed != st.allow {
					t.Errorf("step %d (cost %d at %v) with Redis down: allowed %v, want %v", i, st.cost, st.at, d.Allowed, st.allow)
				}
			}
		})
	}
}
