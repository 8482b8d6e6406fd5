package engine

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"slices"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/slidelimit/slidelimit/internal/redistest"
	"github.com/slidelimit/slidelimit/rules"
)

// step is one call of a semantics scenario at a controlled time.
type step struct {
	at    time.Duration // since redistest.Epoch
	peek  bool
	req   Request
	allow bool
	retry time.Duration
	// per window of the request: used, remaining, reset
	wins [][3]time.Duration
	// giveBack, when > 0, makes the step a GiveBack of the decision of
	// step giveBack-1 instead of an Allow or Peek.
	giveBack int
}

func user(subject string, ws ...rules.Window) Check {
	return Check{Rule: rules.Rule{Kind: rules.User, Windows: ws}, Subject: subject}
}

func ip(subject string, ws ...rules.Window) Check {
	return Check{Rule: rules.Rule{Kind: rules.IP, Windows: ws}, Subject: subject}
}

func req(checks ...Check) Request { return Request{Scope: "s", Checks: checks} }

// bytes is a check of the cost rule user[bytes] counting cost.
func bytesOf(subject string, cost int64, ws ...rules.Window) Check {
	return Check{Rule: rules.Rule{Kind: rules.User, Cost: "bytes", Windows: ws}, Subject: subject, Cost: cost}
}

const ms = time.Millisecond

type scenario struct {
	name  string
	steps []step
}

func scenarios() []scenario {
	sec := time.Second
	one := req(user("u", win(2, sec)))
	two := req(user("u", win(2, 100*ms), win(3, sec)))
	return []scenario{
		{"edge of one window", []step{
			{at: 0, req: one, allow: true, wins: [][3]time.Duration{{1, 1, sec}}},
			{at: 100 * ms, req: one, allow: true, wins: [][3]time.Duration{{2, 0, 900 * ms}}},
			{at: 200 * ms, req: one, retry: 800 * ms, wins: [][3]time.Duration{{2, 0, 800 * ms}}},
			// t-W is t0-1µs: the first entry is still inside (t-W, t].
			{at: sec - time.Microsecond, req: one, retry: time.Microsecond, wins: [][3]time.Duration{{2, 0, time.Microsecond}}},
			// t-W is t0: the entry at t0 is out.
			{at: sec, req: one, allow: true, wins: [][3]time.Duration{{2, 0, 100 * ms}}},
			{at: sec, peek: true, req: one, retry: 100 * ms, wins: [][3]time.Duration{{2, 0, 100 * ms}}},
		}},
		{"two windows", []step{
			{at: 0, req: two, allow: true, wins: [][3]time.Duration{{1, 1, 100 * ms}, {1, 2, sec}}},
			{at: 10 * ms, req: two, allow: true, wins: [][3]time.Duration{{2, 0, 90 * ms}, {2, 1, 990 * ms}}},
			{at: 50 * ms, req: two, retry: 50 * ms, wins: [][3]time.Duration{{2, 0, 50 * ms}, {2, 1, 950 * ms}}},
			{at: 100 * ms, req: two, allow: true, wins: [][3]time.Duration{{2, 0, 10 * ms}, {3, 0, 900 * ms}}},
			// The short window has room from 110ms on, the long one only
			// at 1s: RetryAfter is the longest wait.
			{at: 105 * ms, req: two, retry: 895 * ms, wins: [][3]time.Duration{{2, 0, 5 * ms}, {3, 0, 895 * ms}}},
			{at: 1000 * ms, req: two, allow: true, wins: [][3]time.Duration{{1, 1, 100 * ms}, {3, 0, 10 * ms}}},
		}},
		{"peek writes nothing", []step{
			{at: 0, peek: true, req: one, allow: true, wins: [][3]time.Duration{{0, 2, 0}}},
			{at: 1 * ms, req: one, allow: true, wins: [][3]time.Duration{{1, 1, sec}}},
			{at: 2 * ms, peek: true, req: one, allow: true, wins: [][3]time.Duration{{1, 1, sec - ms}}},
			{at: 3 * ms, req: one, allow: true, wins: [][3]time.Duration{{2, 0, sec - 2*ms}}},
		}},
		{"give back", []step{
			{at: 0, req: one, allow: true, wins: [][3]time.Duration{{1, 1, sec}}},
			{at: 1 * ms, req: one, allow: true, wins: [][3]time.Duration{{2, 0, sec - ms}}},
			{at: 2 * ms, giveBack: 2},
			{at: 3 * ms, req: one, allow: true, wins: [][3]time.Duration{{2, 0, sec - 3*ms}}},
			// Idempotent: giving step 1 back again frees nothing more.
			{at: 4 * ms, giveBack: 2},
			{at: 5 * ms, req: one, retry: sec - 5*ms, wins: [][3]time.Duration{{2, 0, sec - 5*ms}}},
			// A denial counted nothing: nothing to give back.
			{at: 6 * ms, giveBack: 6},
			{at: 7 * ms, giveBack: 1},
			// Step 0 given back: step 3's entry is the only one left.
			{at: 8 * ms, peek: true, req: one, allow: true, wins: [][3]time.Duration{{1, 1, sec - 5*ms}}},
			{at: 9 * ms, giveBack: 9},
			{at: 10 * ms, giveBack: 4},
			{at: 11 * ms, peek: true, req: one, allow: true, wins: [][3]time.Duration{{0, 2, 0}}},
		}},
		{"give back across keys", []step{
			{at: 0, req: req(ip("1.2.3.4", win(10, sec)), user("u", win(1, sec), win(5, 10*sec))), allow: true,
				wins: [][3]time.Duration{{1, 9, sec}, {1, 0, sec}, {1, 4, 10 * sec}}},
			{at: 1 * ms, giveBack: 1},
			{at: 2 * ms, peek: true, req: req(ip("1.2.3.4", win(10, sec)), user("u", win(1, sec), win(5, 10*sec))), allow: true,
				wins: [][3]time.Duration{{0, 10, 0}, {0, 1, 0}, {0, 5, 0}}},
		}},
		{"all or nothing across keys", []step{
			{at: 0, req: req(ip("1.2.3.4", win(10, sec)), user("u", win(1, sec))), allow: true,
				wins: [][3]time.Duration{{1, 9, sec}, {1, 0, sec}}},
			{at: 1 * ms, req: req(ip("1.2.3.4", win(10, sec)), user("u", win(1, sec))), retry: sec - ms,
				wins: [][3]time.Duration{{1, 9, sec - ms}, {1, 0, sec - ms}}},
			// The denial above must not have counted in the ip key.
			{at: 2 * ms, req: req(ip("1.2.3.4", win(10, sec))), allow: true,
				wins: [][3]time.Duration{{2, 8, sec - 2*ms}}},
		}},
		{"duplicate checks merge into one key", []step{
			{at: 0, req: req(user("u", win(3, sec)), user("u", win(2, sec), win(5, 10*sec))), allow: true,
				wins: [][3]time.Duration{{1, 2, sec}, {1, 1, sec}, {1, 4, 10 * sec}}},
			{at: 1 * ms, req: req(user("u", win(3, sec)), user("u", win(2, sec), win(5, 10*sec))), allow: true,
				wins: [][3]time.Duration{{2, 1, sec - ms}, {2, 0, sec - ms}, {2, 3, 10*sec - ms}}},
			// Denied by the merged limit 2: the check that set it denies.
			{at: 2 * ms, req: req(user("u", win(3, sec)), user("u", win(2, sec), win(5, 10*sec))), retry: sec - 2*ms,
				wins: [][3]time.Duration{{2, 1, sec - 2*ms}, {2, 0, sec - 2*ms}, {2, 3, 10*sec - 2*ms}}},
		}},
		{"costs", []step{
			{at: 0, req: req(bytesOf("u", 4, win(10, sec))), allow: true, wins: [][3]time.Duration{{4, 6, sec}}},
			{at: 100 * ms, req: req(bytesOf("u", 5, win(10, sec))), allow: true, wins: [][3]time.Duration{{9, 1, 900 * ms}}},
			// 9 used, 2 more: the entry of 4 must leave, at 1 s.
			{at: 200 * ms, req: req(bytesOf("u", 2, win(10, sec))), retry: 800 * ms, wins: [][3]time.Duration{{9, 1, 800 * ms}}},
			{at: 300 * ms, req: req(bytesOf("u", 1, win(10, sec))), allow: true, wins: [][3]time.Duration{{10, 0, 700 * ms}}},
			// 5 more: 4 leaving is not enough, 4+5 is: at 1.1 s.
			{at: 400 * ms, req: req(bytesOf("u", 5, win(10, sec))), retry: 700 * ms, wins: [][3]time.Duration{{10, 0, 600 * ms}}},
			{at: 400 * ms, peek: true, req: req(bytesOf("u", 1, win(10, sec))), retry: 600 * ms, wins: [][3]time.Duration{{10, 0, 600 * ms}}},
			{at: sec, req: req(bytesOf("u", 5, win(10, sec))), retry: 100 * ms, wins: [][3]time.Duration{{6, 4, 100 * ms}}},
			{at: 1100 * ms, req: req(bytesOf("u", 5, win(10, sec))), allow: true, wins: [][3]time.Duration{{6, 4, 200 * ms}}},
			// The count rule of the same kind and subject is another key.
			{at: 1100 * ms, req: req(user("u", win(1, sec))), allow: true, wins: [][3]time.Duration{{1, 0, sec}}},
		}},
		{"costs across keys and windows", []step{
			{at: 0, req: req(user("u", win(3, sec)), bytesOf("u", 700, win(1000, sec), win(1500, 10*sec))), allow: true,
				wins: [][3]time.Duration{{1, 2, sec}, {700, 300, sec}, {700, 800, 10 * sec}}},
			// Denied by the short byte window only; the count key is not
			// counted either.
			{at: 500 * ms, req: req(user("u", win(3, sec)), bytesOf("u", 400, win(1000, sec), win(1500, 10*sec))), retry: 500 * ms,
				wins: [][3]time.Duration{{1, 2, 500 * ms}, {700, 300, 500 * ms}, {700, 800, 9500 * ms}}},
			{at: sec, req: req(user("u", win(3, sec)), bytesOf("u", 400, win(1000, sec), win(1500, 10*sec))), allow: true,
				wins: [][3]time.Duration{{1, 2, sec}, {400, 600, sec}, {1100, 400, 9 * sec}}},
			// 500 fits the short window, not the long one until the 700
			// leave at 10 s.
			{at: 2 * sec, req: req(bytesOf("u", 500, win(1000, sec), win(1500, 10*sec))), retry: 8 * sec,
				wins: [][3]time.Duration{{0, 1000, 0}, {1100, 400, 8 * sec}}},
		}},
		{"give back a cost", []step{
			{at: 0, req: req(bytesOf("u", 3, win(10, sec))), allow: true, wins: [][3]time.Duration{{3, 7, sec}}},
			{at: 1 * ms, req: req(bytesOf("u", 4, win(10, sec))), allow: true, wins: [][3]time.Duration{{7, 3, sec - ms}}},
			{at: 2 * ms, giveBack: 2},
			{at: 3 * ms, peek: true, req: req(bytesOf("u", 1, win(10, sec))), allow: true, wins: [][3]time.Duration{{3, 7, sec - 3*ms}}},
			{at: 4 * ms, giveBack: 2}, // idempotent
			{at: 5 * ms, giveBack: 1},
			{at: 6 * ms, peek: true, req: req(bytesOf("u", 1, win(10, sec))), allow: true, wins: [][3]time.Duration{{0, 10, 0}}},
		}},
		{"give back a cost from the middle", []step{
			{at: 0, req: req(bytesOf("u", 3, win(10, sec))), allow: true, wins: [][3]time.Duration{{3, 7, sec}}},
			{at: 1 * ms, req: req(bytesOf("u", 4, win(10, sec))), allow: true, wins: [][3]time.Duration{{7, 3, sec - ms}}},
			{at: 2 * ms, giveBack: 1},
			{at: 3 * ms, peek: true, req: req(bytesOf("u", 1, win(10, sec))), allow: true, wins: [][3]time.Duration{{4, 6, sec - 2*ms}}},
			{at: 4 * ms, giveBack: 1}, // idempotent
			{at: 5 * ms, req: req(bytesOf("u", 6, win(10, sec))), allow: true, wins: [][3]time.Duration{{10, 0, sec - 4*ms}}},
			{at: 6 * ms, giveBack: 2},
			{at: 7 * ms, peek: true, req: req(bytesOf("u", 1, win(10, sec))), allow: true, wins: [][3]time.Duration{{6, 4, sec - 2*ms}}},
		}},
		{"retry after counts only the entries that must leave", []step{
			// A wider group shares the key: 5 entries, 1 s apart (its
			// window more than an eighth full, so every Reset is read).
			{at: 0, req: req(user("u", win(15, 10*sec))), allow: true, wins: [][3]time.Duration{{1, 14, 10 * sec}}},
			{at: 1 * sec, req: req(user("u", win(15, 10*sec))), allow: true, wins: [][3]time.Duration{{2, 13, 9 * sec}}},
			{at: 2 * sec, req: req(user("u", win(15, 10*sec))), allow: true, wins: [][3]time.Duration{{3, 12, 8 * sec}}},
			{at: 3 * sec, req: req(user("u", win(15, 10*sec))), allow: true, wins: [][3]time.Duration{{4, 11, 7 * sec}}},
			{at: 4 * sec, req: req(user("u", win(15, 10*sec))), allow: true, wins: [][3]time.Duration{{5, 10, 6 * sec}}},
			// Limit 3 with 5 used: the 3 oldest (t0, t0+1s, t0+2s) must
			// leave; the last of them leaves at 12 s.
			{at: 5 * sec, req: req(user("u", win(3, 10*sec))), retry: 7 * sec, wins: [][3]time.Duration{{5, 0, 5 * sec}}},
		}},
	}
}

// cacheModes yields every scenario twice: with cached denials off, where
// every decision comes from its backend, and on, where a denial may come
// from the cache instead, saying exactly the same.
func cacheModes(scs []scenario) iter.Seq2[scenario, bool] {
	return func(yield func(scenario, bool) bool) {
		for _, cached := range []bool{false, true} {
			for _, sc := range scs {
				if !yield(sc, cached) {
					return
				}
			}
		}
	}
}

func cacheName(cached bool) string {
	if cached {
		return " cached"
	}
	return ""
}

// TestSemantics runs the scenarios on real Redis under a fake clock.
func TestSemantics(t *testing.T) {
	t.Parallel()
	_, rc := redistest.StartClient(t)
	for sc, cached := range cacheModes(scenarios()) {
		t.Run(sc.name+cacheName(cached), func(t *testing.T) {
			t.Parallel()
			prefix := redistest.Prefix(t)
			afterTTLs(t, rc, prefix)
			clk := redistest.NewClock()
			e := newEngine(t, rc, WithKeyPrefix(prefix), WithClock(clk.Now), WithCachedDenials(cached))
			runScenario(t, e, clk, sc, fromRedis)
		})
	}
}

// TestSemanticsMiniredis runs the scenarios on miniredis, which other
// packages use in their unit tests: the script must work there too.
func TestSemanticsMiniredis(t *testing.T) {
	t.Parallel()
	_, rc := redistest.Mini(t)
	for sc, cached := range cacheModes(scenarios()) {
		t.Run(sc.name+cacheName(cached), func(t *testing.T) {
			t.Parallel()
			clk := redistest.NewClock()
			e := newEngine(t, rc, WithKeyPrefix(redistest.Prefix(t)), WithClock(clk.Now), WithTimeout(10*time.Second), WithCachedDenials(cached))
			runScenario(t, e, clk, sc, fromRedis)
		})
	}
}

// TestSemanticsLocal runs the same scenarios on the fallback limiter: a
// client whose server refuses connections, and FailLocal.
func TestSemanticsLocal(t *testing.T) {
	t.Parallel()
	addr := redistest.RefusedAddr // nothing listens there
	rc := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
	t.Cleanup(func() { rc.Close() })
	for sc, cached := range cacheModes(scenarios()) {
		t.Run(sc.name+cacheName(cached), func(t *testing.T) {
			t.Parallel()
			clk := redistest.NewClock()
			e := newEngine(t, rc, WithClock(clk.Now), WithFailMode(rules.FailLocal), WithCachedDenials(cached))
			runScenario(t, e, clk, sc, fromLocal)
		})
	}
}

func runScenario(t *testing.T, e *Engine, clk *redistest.Clock, sc scenario, src source) {
	t.Helper()
	decs := make([]Decision, len(sc.steps))
	for i, s := range sc.steps {
		clk.Set(s.at)
		if s.giveBack > 0 {
			if err := e.giveBack(context.Background(), sc.steps[s.giveBack-1].req, decs[s.giveBack-1]); err != nil {
				t.Fatalf("step %d (GiveBack of step %d): %v", i, s.giveBack-1, err)
			}
			continue
		}
		call, f := "Allow", e.Allow
		if s.peek {
			call, f = "Peek", e.peek
		}
		d, err := f(context.Background(), s.req)
		decs[i] = d
		where := fmt.Sprintf("step %d (%s at %v)", i, call, s.at)
		if src == fromRedis && err != nil || src != fromRedis && !errors.Is(err, ErrBackend) {
			t.Fatalf("%s: %v", where, err)
		}
		checkDecision(t, where, d, s, clk.Now(), src, e.denials)
	}
}

func checkDecision(t *testing.T, where string, d Decision, s step, now time.Time, src source, cached bool) {
	t.Helper()
	if d.Source == "cache" && src == fromRedis && cached && !d.Allowed {
		src = fromCache // a cached denial must say exactly what Redis would
	}
	if d.Source != src.String() || d.Allowed != s.allow || d.RetryAfter != s.retry || !d.Time.Equal(now) {
		t.Errorf("%s: allowed=%v retry=%v source=%v time=%v, want %v %v %v %v",
			where, d.Allowed, d.RetryAfter, d.Source, d.Time, s.allow, s.retry, src, now)
	}
	if s.allow != (d.Denied == WindowState{}) {
		t.Errorf("%s: Denied=%+v with Allowed=%v", where, d.Denied, d.Allowed)
	}
	if d.Denied != (WindowState{}) && !slices.Contains(d.Windows, d.Denied) {
		t.Errorf("%s: Denied=%+v is none of Windows %+v", where, d.Denied, d.Windows)
	}
	if d.Denied != (WindowState{}) && d.Denied.Reset > 0 && d.RetryAfter > d.Denied.Window.Period {
		t.Errorf("%s: RetryAfter %v beyond the denying window %v", where, d.RetryAfter, d.Denied.Window.Period)
	}
	if len(d.Windows) != len(s.wins) {
		t.Fatalf("%s: %d windows, want %d", where, len(d.Windows), len(s.wins))
	}
	for j, w := range d.Windows {
		got := [3]time.Duration{time.Duration(w.Used), time.Duration(w.Remaining), w.Reset}
		if got != s.wins[j] {
			t.Errorf("%s: window %d (check %d, %v/%v): used, remaining, reset = %v, want %v",
				where, j, w.Check, w.Window.Limit, w.Window.Period, got, s.wins[j])
		}
	}
}

// TestSemanticsRing runs the scenarios on a Ring of two servers, where the
// engine makes one script call per key and rolls back across shards.
func TestSemanticsRing(t *testing.T) {
	t.Parallel()
	s1, c1 := redistest.StartClient(t)
	s2, c2 := redistest.StartClient(t)
	ring := redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"a": s1.Addr, "b": s2.Addr}})
	t.Cleanup(func() { ring.Close() })
	for sc, cached := range cacheModes(scenarios()) {
		t.Run(sc.name+cacheName(cached), func(t *testing.T) {
			t.Parallel()
			prefix := redistest.Prefix(t)
			afterTTLs(t, c1, prefix)
			afterTTLs(t, c2, prefix)
			clk := redistest.NewClock()
			e := newEngine(t, ring, WithKeyPrefix(prefix), WithClock(clk.Now), WithCachedDenials(cached))
			runScenario(t, e, clk, sc, fromRedis)
		})
	}
}
