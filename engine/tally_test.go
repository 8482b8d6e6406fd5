package engine

import (
	"context"
	"errors"
	"fmt"
	"github.com/slidelimit/slidelimit/internal/access"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/slidelimit/slidelimit/rules"
)

// TestTallyTop denies three users 18, 8 and 1 times through two engines
// sharing one Redis, most of the denials cached, and reads them back in
// that order from either engine, on every backend that stores.
func TestTallyTop(t *testing.T) {
	t.Parallel()
	for _, b := range testBackends(t) {
		if b.name == "local" {
			continue // nothing is written: see TestTallyOutage
		}
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			opts := append([]Option{WithPrefix(testPrefix(t)), withTallyFlush(50 * time.Millisecond)}, b.opts...)
			e1 := newEngine(t, b.c, opts...)
			e2 := newEngine(t, b.c, opts...)
			ctx := context.Background()
			denied := map[string]int{"alice": 18, "bob": 8, "carol": 1}
			var cached int
			for user, n := range denied {
				for i := range n + 1 { // the first is admitted
					e := []*Engine{e1, e2}[i%2]
					d, err := e.Allow(ctx, One("GET /x", rules.User, user, win(1, time.Hour)))
					if err != nil {
						t.Fatal(err)
					}
					if d.Allowed != (i == 0) {
						t.Fatalf("%s request %d: allowed %v", user, i, d.Allowed)
					}
					if d.Source == FromCache {
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
				top, err := []*Engine{e1, e2}[int(time.Since(start)/time.Millisecond)%2].topDenied(ctx, time.Hour, 10)
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
				top, err := e1.topDenied(ctx, since, 2)
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

func tallyText(top []access.Denials) string {
	var s []string
	for _, d := range top {
		s = append(s, fmt.Sprintf("%s %s %s %d", d.Scope, d.Limiter, d.Subject, d.Denied))
	}
	return strings.Join(s, "; ")
}

// TestTallyHashed checks that a hashed subject is reported by its raw
// value by the process that denied it, and as its hash by another one.
func TestTallyHashed(t *testing.T) {
	t.Parallel()
	_, c := startRedis(t)
	prefix := testPrefix(t)
	e1 := newEngine(t, c, WithPrefix(prefix), WithHashSubjects([]byte("s")), withTallyFlush(20*time.Millisecond))
	e2 := newEngine(t, c, WithPrefix(prefix), WithHashSubjects([]byte("s")))
	ctx := context.Background()
	for range 3 {
		e1.Allow(ctx, One("s|c%pe", rules.User, "d|a#n%", win(1, time.Hour)))
	}
	var top []access.Denials
	for start := time.Now(); time.Since(start) < 15*time.Second && len(top) == 0; time.Sleep(20 * time.Millisecond) {
		top, _ = e1.topDenied(ctx, time.Minute, 0)
	}
	if len(top) != 1 || top[0].Subject != "d|a#n%" || top[0].Scope != "s|c%pe" || top[0].Hashed || top[0].Denied != 2 {
		t.Fatalf("top of the denying process: %+v", top)
	}
	top, err := e2.topDenied(ctx, time.Minute, 0)
	if err != nil || len(top) != 1 || !top[0].Hashed || !strings.HasPrefix(top[0].Subject, "#") || top[0].Denied != 2 {
		t.Fatalf("top of another process: %+v, %v", top, err)
	}
	if _, err := e1.topDenied(ctx, 2*time.Hour, 0); err == nil {
		t.Error("topDenied(2h) did not fail")
	}
}

// TestTallyOverflow fills a shard beyond its capacity: the subject denied
// most keeps its count, the others' counts are dropped and counted.
func TestTallyOverflow(t *testing.T) {
	t.Parallel()
	m := newTallies()
	e := &Engine{tally: m, keyer: &keyer{}}
	deny := func(subject string) {
		req := One("s", rules.User, subject, win(1, time.Minute))
		d := Decision{Denied: WindowState{Window: win(1, time.Minute)}}
		e.noteDenial(&req, &d)
	}
	for i := range 100000 {
		deny("heavy")
		deny(fmt.Sprint("once-", i))
	}
	keys, counts := m.take(nil, nil)
	if len(keys) > tallyPending {
		t.Fatalf("%d entries pending, more than %d", len(keys), tallyPending)
	}
	var total int64
	for i, k := range keys {
		total += counts[i]
		if k.subject == "heavy" && counts[i] != 100000 {
			t.Errorf("heavy: %d, want 100000", counts[i])
		}
	}
	if total+m.overflow.Load() != 200000 {
		t.Errorf("kept %d + dropped %d != 200000", total, m.overflow.Load())
	}
	if keys, _ := m.take(nil, nil); len(keys) != 0 {
		t.Errorf("%d entries after take", len(keys))
	}
}

// TestTallyOutage denies through the fallback limiter while Redis refuses
// connections: the writes fail, are dropped and counted, and logged once.
func TestTallyOutage(t *testing.T) {
	t.Parallel()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	down := l.Addr().String()
	l.Close() // nothing listens: every call is refused
	dc := redis.NewClient(&redis.Options{Addr: down, MaxRetries: -1})
	t.Cleanup(func() { dc.Close() })
	h := &recordHandler{}
	e := newEngine(t, dc, withTallyFlush(10*time.Millisecond), WithLogger(slog.New(h)), WithFailMode(rules.FailLocal))
	ctx := context.Background()
	for i := range 200 {
		e.Allow(ctx, One("s", rules.User, "u", win(1, time.Hour)))
		if i%20 == 0 {
			time.Sleep(15 * time.Millisecond)
		}
	}
	e.Close()
	if got := e.tallyStats().Failed; got != 199 {
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
	e := &Engine{tally: newTallies(), keyer: &keyer{}}
	pattern := []string{"a", "a", "a", "b", "a", "a", "c", "b"}
	const workers, each = 8, 20000
	want := map[string]int64{}
	for i := range each {
		want[pattern[i%len(pattern)]] += workers
	}
	got := map[string]int64{}
	take := func() {
		keys, counts := e.tally.take(nil, nil)
		for i, k := range keys {
			got[k.subject] += counts[i]
		}
	}
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				r := Request{Scope: "s", Checks: []Check{{Limiter: rules.Limiter{Kind: rules.User}, Subject: pattern[i%len(pattern)]}}}
				d := Decision{Denied: WindowState{Window: rules.Window{Limit: 1, Period: time.Second}}}
				e.noteDenial(&r, &d)
			}
		}()
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
	srv, rc := startRedis(t)
	e := newEngine(t, rc, WithPrefix(testPrefix(t)))
	srv.Kill()
	r := req(user("u", win(10, time.Second)))
	for i := 0; !e.doms.one.down.Load(); i++ {
		if i == 100 {
			t.Fatal("the engine never considered the killed server down")
		}
		_, _ = e.Allow(context.Background(), r)
	}
	_, err := e.topDenied(context.Background(), time.Minute, 10)
	if !errors.Is(err, ErrUnavailable) || !errors.Is(err, ErrBackend) {
		t.Fatalf("TopDenied while down: %v, want ErrUnavailable and ErrBackend", err)
	}
}
