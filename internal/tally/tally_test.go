package tally

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/slidelimit/slidelimit/engine"
	"github.com/slidelimit/slidelimit/internal/backenderr"
	"github.com/slidelimit/slidelimit/internal/keyparts"
	"github.com/slidelimit/slidelimit/internal/redistest"
	"github.com/slidelimit/slidelimit/rules"
)

// TestTallyTop denies three users 18, 8 and 1 times through two engines
// sharing one Redis, each with its tallies, most of the denials cached,
// and reads them back in that order from either process's tallies, on
// real Redis, miniredis, a ring and a cluster (the {tally} hash tag).
func TestTallyTop(t *testing.T) {
	t.Parallel()
	_, rc := redistest.StartClient(t)
	_, mc := redistest.Mini(t)
	_, c1 := redistest.StartClient(t)
	_, c2 := redistest.StartClient(t)
	ring := redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"a": c1.Options().Addr, "b": c2.Options().Addr}})
	t.Cleanup(func() { ring.Close() })
	cc := redistest.StartCluster(t).Client(t)
	for _, b := range []struct {
		name string
		c    engine.Client
	}{{"redis", rc}, {"miniredis", mc}, {"ring", ring}, {"cluster", cc}} {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			prefix := engine.WithKeyPrefix(redistest.Prefix(t))
			e1, e2 := newEngine(t, b.c, prefix), newEngine(t, b.c, prefix)
			t1, t2 := withTallies(t, e1, 50*time.Millisecond), withTallies(t, e2, 50*time.Millisecond)
			ctx := context.Background()
			denied := map[string]int{"alice": 18, "bob": 8, "carol": 1}
			var cached int
			for user, n := range denied {
				for i := range n + 1 { // the first is admitted
					e := []*engine.Engine{e1, e2}[i%2]
					d, err := e.Allow(ctx, engine.One("GET /x", rules.User, user, win(1, time.Hour)))
					if err != nil {
						t.Fatal(err)
					}
					if d.Allowed != (i == 0) {
						t.Fatalf("%s request %d: allowed %v", user, i, d.Allowed)
					}
					if d.Source == "cache" {
						cached++
					}
				}
			}
			if cached < 27/2 {
				t.Errorf("%d of 27 denials cached, want most", cached)
			}
			want := "GET /x user alice 18; GET /x user bob 8; GET /x user carol 1"
			var got string
			for start := time.Now(); time.Since(start) < 15*time.Second; time.Sleep(50 * time.Millisecond) {
				top, err := []*Tallies{t1, t2}[int(time.Since(start)/time.Millisecond)%2].TopDenied(ctx, time.Hour, 10)
				if err != nil {
					t.Fatal(err)
				}
				got = tallyText(top)
				if got == want {
					break
				}
			}
			if got != want {
				t.Fatalf("top: %s, want %s", got, want)
			}
			for _, since := range []time.Duration{time.Minute, 5 * time.Minute} {
				top, err := t1.TopDenied(ctx, since, 2)
				if err != nil {
					t.Fatal(err)
				}
				if got := tallyText(top); got != "GET /x user alice 18; GET /x user bob 8" {
					t.Errorf("top 2 of %s: %s", since, got)
				}
			}
		})
	}
}

func tallyText(top []Denials) string {
	var s []string
	for _, d := range top {
		s = append(s, fmt.Sprintf("%s %s %s %d", d.Scope, d.Rule, d.Subject, d.Denied))
	}
	return strings.Join(s, "; ")
}

// TestTallyHashed checks that a hashed subject is reported by its raw
// value by the process that denied it, and as its hash by another one,
// whose tallies count nothing (not started, as a Limiter with
// the tallies off) but read.
func TestTallyHashed(t *testing.T) {
	t.Parallel()
	_, c := redistest.StartClient(t)
	prefix := redistest.Prefix(t)
	e1 := newEngine(t, c, engine.WithKeyPrefix(prefix), engine.WithHashedSubjects([]byte("s")))
	t1 := withTallies(t, e1, 20*time.Millisecond)
	t2 := New(storeOf(newEngine(t, c, engine.WithKeyPrefix(prefix), engine.WithHashedSubjects([]byte("s")))))
	ctx := context.Background()
	for range 3 {
		e1.Allow(ctx, engine.One("s|c%pe", rules.User, "d|a#n%", win(1, time.Hour)))
	}
	var top []Denials
	for start := time.Now(); time.Since(start) < 15*time.Second && len(top) == 0; time.Sleep(20 * time.Millisecond) {
		top, _ = t1.TopDenied(ctx, time.Minute, 0)
	}
	if len(top) != 1 || top[0].Subject != "d|a#n%" || top[0].Scope != "s|c%pe" || top[0].Hashed || top[0].Denied != 2 {
		t.Fatalf("top of the denying process: %+v", top)
	}
	top, err := t2.TopDenied(ctx, time.Minute, 0)
	if err != nil || len(top) != 1 || !top[0].Hashed || !keyparts.IsStoredHash(top[0].Subject) || top[0].Denied != 2 {
		t.Fatalf("top of another process: %+v, %v", top, err)
	}
	if _, err := t1.TopDenied(ctx, 2*time.Hour, 0); !errors.Is(err, engine.ErrInvalid) {
		t.Errorf("TopDenied(2h): %v, want ErrInvalid", err)
	}
}

// TestTallyOverflow fills a shard beyond its capacity: the subject denied
// most keeps its count, the others' counts are dropped and counted.
func TestTallyOverflow(t *testing.T) {
	t.Parallel()
	m := New(Store{}) // never written
	for i := range 100000 {
		m.Note(denial("s", "heavy"))
		m.Note(denial("s", fmt.Sprint("once-", i)))
	}
	keys, counts := m.take(nil, nil)
	if len(keys) > maxPending {
		t.Fatalf("%d entries pending, more than %d", len(keys), maxPending)
	}
	var total int64
	for i, k := range keys {
		total += counts[i]
		if k.subject == "heavy" && counts[i] != 100000 {
			t.Errorf("heavy: %d, want 100000", counts[i])
		}
	}
	if total+m.Stats().Overflow != 200000 {
		t.Errorf("kept %d + dropped %d != 200000", total, m.Stats().Overflow)
	}
	if keys, _ := m.take(nil, nil); len(keys) != 0 {
		t.Errorf("%d entries after take", len(keys))
	}
}

// TestTallyOutage denies through the fallback limiter while Redis refuses
// connections: the writes fail, are dropped and counted, and logged once.
func TestTallyOutage(t *testing.T) {
	t.Parallel()
	down := redistest.RefusedAddr // nothing listens: every call is refused
	dc := redis.NewClient(&redis.Options{Addr: down, MaxRetries: -1})
	t.Cleanup(func() { dc.Close() })
	h := &recordHandler{}
	e := newEngine(t, dc, engine.WithLogger(slog.New(h)), engine.WithFailMode(rules.FailLocal))
	tl := withTallies(t, e, 10*time.Millisecond)
	ctx := context.Background()
	// Ten runs of denials, each written (and failed) before the next: the
	// first is admitted, so after request i the i denials so far failed.
	for i := range 200 {
		e.Allow(ctx, engine.One("s", rules.User, "u", win(1, time.Hour)))
		if i%20 == 0 && i > 0 {
			redistest.Eventually(t, "a failed write", func() bool { return tl.Stats().Failed == int64(i) })
		}
	}
	e.Close()
	tl.Close()
	if got := tl.Stats().Failed; got != 199 {
		t.Errorf("failed %d, want 199", got)
	}
	if n := len(h.matching("denial tallies cannot be written")); n != 1 {
		t.Errorf("%d warnings, want 1", n)
	}
}

// TestTallyHotExact notes denials of a few subjects, one of them denied
// again and again (the hot one, counted without a lock), from several
// goroutines while writes take the tallies: every denial is counted once.
func TestTallyHotExact(t *testing.T) {
	t.Parallel()
	tl := New(Store{}) // never written
	pattern := []string{"a", "a", "a", "b", "a", "a", "c", "b"}
	const workers, each = 8, 20000
	want := map[string]int64{}
	for i := range each {
		want[pattern[i%len(pattern)]] += workers
	}
	got := map[string]int64{}
	take := func() {
		keys, counts := tl.take(nil, nil)
		for i, k := range keys {
			got[k.subject] += counts[i]
		}
	}
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for i := range each {
				tl.Note(denial("s", pattern[i%len(pattern)]))
			}
		})
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	for writing := true; writing; {
		select {
		case <-done:
			writing = false
		default:
			take()
		}
	}
	take()
	take() // the hot entries replaced last are read a second time
	for s, n := range want {
		if got[s] != n {
			t.Errorf("subject %s: %d denials tallied, want %d", s, got[s], n)
		}
	}
}

// TestTopDeniedWhileDown checks that TopDenied does not ask a server the
// engine considers down: through the pool it would wait for its deadline,
// and go-redis would log a failed dial for each retry (issue 41: the
// operator page filled an outage's log).
func TestTopDeniedWhileDown(t *testing.T) {
	t.Parallel()
	srv, rc := redistest.StartClient(t)
	e := newEngine(t, rc, engine.WithKeyPrefix(redistest.Prefix(t)))
	tl := withTallies(t, e, 0)
	srv.Kill()
	r := engine.One("s", rules.User, "u", win(10, time.Second))
	for i := 0; !tl.store.Down(); i++ {
		if i == 100 {
			t.Fatal("the engine never considered the killed server down")
		}
		_, _ = e.Allow(context.Background(), r)
	}
	_, err := tl.TopDenied(context.Background(), time.Minute, 10)
	if !errors.Is(err, backenderr.ErrNotAsked) || !errors.Is(err, engine.ErrBackend) {
		t.Fatalf("TopDenied while down: %v, want not asked and ErrBackend", err)
	}
}

// TestTallyNoGoroutines checks that Close stops the writer of Start and
// writes what was counted since its last write. Not parallel: it counts
// the process's goroutines.
func TestTallyNoGoroutines(t *testing.T) {
	_, c := redistest.StartClient(t)
	tl := New(storeOf(newEngine(t, c, engine.WithKeyPrefix(redistest.Prefix(t)))))
	before := runtime.NumGoroutine()
	tl.Start(MaxFlush)
	tl.Note(denial("s", "u"))
	tl.Close()
	tl.Close() // idempotent
	for i := 0; runtime.NumGoroutine() > before; i++ {
		if i == 100 {
			t.Fatalf("%d goroutines after Close, %d before", runtime.NumGoroutine(), before)
		}
		time.Sleep(10 * time.Millisecond)
	}
	top, err := tl.TopDenied(context.Background(), time.Minute, 0)
	if err != nil || tallyText(top) != "s user u 1" {
		t.Fatalf("top after Close: %q, %v; want the denial written", tallyText(top), err)
	}
}
