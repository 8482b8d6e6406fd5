package engine

import (
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/slidelimit/slidelimit/internal/redistest"
)

// unreadScenarios are scenarios where the shortest window of a key has more
// room than a longer one. When a request is not denied, the script does not
// read that window's oldest entry and the Decision reports its period as
// its Reset (an upper bound), unless the request fills a window. A denial
// reports every window exactly, also a denial by another key, and a cached
// denial after it says the same.
func unreadScenarios() []scenario {
	sec, min := time.Second, time.Minute
	bound := func(time.Duration) time.Duration { return sec } // the short window's period
	one := req(user("u", win(3, min), win(10, sec)))
	two := req(user("u", win(5, min), win(10, sec)), ip("i", win(2, min)))
	eighth := req(user("e", win(16, min)))
	return []scenario{
		{"short window with more room", []step{
			{at: 0, req: one, allow: true, wins: [][3]time.Duration{{1, 2, min}, {1, 9, sec}}},
			{at: 100 * ms, req: one, allow: true, wins: [][3]time.Duration{{2, 1, min - 100*ms}, {2, 8, bound(900 * ms)}}},
			// It fills the longer window: every window is read.
			{at: 200 * ms, req: one, allow: true, wins: [][3]time.Duration{{3, 0, min - 200*ms}, {3, 7, 800 * ms}}},
			{at: 300 * ms, req: one, retry: min - 300*ms, wins: [][3]time.Duration{{3, 0, min - 300*ms}, {3, 7, 700 * ms}}},
			{at: 400 * ms, req: one, retry: min - 400*ms, wins: [][3]time.Duration{{3, 0, min - 400*ms}, {3, 7, 600 * ms}}},
			{at: 400 * ms, peek: true, req: one, retry: min - 400*ms, wins: [][3]time.Duration{{3, 0, min - 400*ms}, {3, 7, 600 * ms}}},
		}},
		{"an eighth full", []step{
			{at: 0, req: eighth, allow: true, wins: [][3]time.Duration{{1, 15, min}}},
			// At most an eighth full after it: the period.
			{at: 100 * ms, req: eighth, allow: true, wins: [][3]time.Duration{{2, 14, min}}},
			{at: 200 * ms, req: eighth, allow: true, wins: [][3]time.Duration{{3, 13, min - 200*ms}}},
		}},
		{"denied by another key", []step{
			{at: 0, req: two, allow: true, wins: [][3]time.Duration{{1, 4, min}, {1, 9, sec}, {1, 1, min}}},
			// It fills ip's window: every window is read.
			{at: 100 * ms, req: two, allow: true, wins: [][3]time.Duration{{2, 3, min - 100*ms}, {2, 8, 900 * ms}, {2, 0, min - 100*ms}}},
			{at: 200 * ms, req: two, retry: min - 200*ms, wins: [][3]time.Duration{{2, 3, min - 200*ms}, {2, 8, 800 * ms}, {2, 0, min - 200*ms}}},
			{at: 300 * ms, req: two, retry: min - 300*ms, wins: [][3]time.Duration{{2, 3, min - 300*ms}, {2, 8, 700 * ms}, {2, 0, min - 300*ms}}},
		}},
	}
}

// TestUnreadOldest runs unreadScenarios on real Redis (a Function) and
// miniredis (the EVAL form), with cached denials off and on.
func TestUnreadOldest(t *testing.T) {
	t.Parallel()
	_, rc := redistest.StartClient(t)
	_, mini := redistest.Mini(t)
	for _, server := range []struct {
		name string
		rc   *redis.Client
	}{{"redis", rc}, {"miniredis", mini}} {
		for sc, cached := range cacheModes(unreadScenarios()) {
			t.Run(server.name+" "+sc.name+cacheName(cached), func(t *testing.T) {
				t.Parallel()
				prefix := redistest.Prefix(t)
				clk := redistest.NewClock()
				e := newEngine(t, server.rc, WithKeyPrefix(prefix), WithClock(clk.Now), WithCachedDenials(cached))
				runScenario(t, e, clk, sc, fromRedis)
			})
		}
	}
}

// TestUnreadOldestRing runs unreadScenarios on a Ring of two servers: each
// key is decided by a call of its own, which replies every oldest entry,
// as a denial by the other key must report them.
func TestUnreadOldestRing(t *testing.T) {
	t.Parallel()
	s1, _ := redistest.StartClient(t)
	s2, _ := redistest.StartClient(t)
	ring := redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"a": s1.Addr, "b": s2.Addr}})
	t.Cleanup(func() { ring.Close() })
	for sc, cached := range cacheModes(unreadScenarios()) {
		t.Run(sc.name+cacheName(cached), func(t *testing.T) {
			t.Parallel()
			clk := redistest.NewClock()
			e := newEngine(t, ring, WithKeyPrefix(redistest.Prefix(t)), WithClock(clk.Now), WithCachedDenials(cached))
			runScenario(t, e, clk, sc, fromRedis)
		})
	}
}

// TestUnreadOldestCluster runs unreadScenarios on a Redis Cluster: the
// request of one key is decided by one call, which leaves the unread entry
// out, the request of two keys in two slots by a call per slot, which
// replies every oldest entry.
func TestUnreadOldestCluster(t *testing.T) {
	t.Parallel()
	cl := redistest.StartCluster(t)
	cc := cl.Client(t)
	for sc, cached := range cacheModes(unreadScenarios()) {
		t.Run(sc.name+cacheName(cached), func(t *testing.T) {
			t.Parallel()
			prefix := redistest.Prefix(t)
			afterClusterTTLs(t, cl, prefix)
			clk := redistest.NewClock()
			e := newEngine(t, cc, WithKeyPrefix(prefix), WithClock(clk.Now), WithCachedDenials(cached))
			runScenario(t, e, clk, sc, fromRedis)
		})
	}
}

// TestUnreadOldestCalls counts the ZRANGEs of admissions into a key whose
// shorter window holds an entry and has more room than the longer one,
// which is more than an eighth full: one per admission (the longer
// window's oldest entry), none for the shorter window's, which the script
// read too before (two per admission).
func TestUnreadOldestCalls(t *testing.T) {
	t.Parallel()
	// 44 a minute: more than an eighth full from the sixth admission on,
	// and never full.
	r := req(user("u", win(44, time.Minute), win(2000, time.Second)))
	const warm, n = 6, 36
	s := callsEvery600ms(t, r, warm, n, func(i int, d Decision) {
		if i > 0 && d.Windows[1].Reset != time.Second {
			t.Errorf("admission %d: the second window's Reset %v, want its period", i, d.Windows[1].Reset)
		}
		if want := time.Minute - time.Duration(i)*600*ms; i >= warm && d.Windows[0].Reset != want {
			t.Errorf("admission %d: the first window's Reset %v, want %v", i, d.Windows[0].Reset, want)
		}
	})
	if got := s["zrange"].calls; got != n {
		t.Errorf("%d ZRANGEs in %d admissions, want %d", got, n, n)
	}
	if got := s["zcount"].calls; got != 2*n {
		t.Errorf("%d ZCOUNTs in %d admissions, want %d", got, n, 2*n)
	}
}

// TestUnreadEighthCalls counts the ZRANGEs of admissions into a key whose
// windows stay at most an eighth full: none, and each window reports its
// period as its Reset.
func TestUnreadEighthCalls(t *testing.T) {
	t.Parallel()
	r := req(user("u", win(1000, time.Minute), win(2000, time.Second)))
	const n = 40
	s := callsEvery600ms(t, r, 1, n, func(i int, d Decision) {
		if d.Windows[0].Reset != time.Minute || d.Windows[1].Reset != time.Second {
			t.Errorf("admission %d: Resets %v and %v, want the periods", i, d.Windows[0].Reset, d.Windows[1].Reset)
		}
	})
	if got := s["zrange"].calls; got != 0 {
		t.Errorf("%d ZRANGEs in %d admissions, want 0", got, n)
	}
}

// callsEvery600ms admits r warm+n times, 600 ms apart on a test clock, into
// a Redis of its own, checking each Decision with check, and returns the
// commands Redis ran for the last n.
func callsEvery600ms(t *testing.T, r Request, warm, n int, check func(i int, d Decision)) cmdStats {
	t.Helper()
	_, rc := redistest.StartClient(t)
	clk := redistest.NewClock()
	e := newEngine(t, rc, WithKeyPrefix(redistest.Prefix(t)), WithClock(clk.Now))
	var before cmdStats
	for i := range warm + n {
		clk.Set(time.Duration(i) * 600 * ms)
		d, err := e.Allow(t.Context(), r)
		if err != nil || !d.Allowed {
			t.Fatalf("admission %d: %+v, %v", i, d, err)
		}
		check(i, d)
		if i == warm-1 {
			before = readCmdStats(t, rc)
		}
	}
	s := cmdStats{}
	s.add(readCmdStats(t, rc), before)
	return s
}
