package engine

import (
	"context"
	"errors"
	"runtime"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/slidelimit/slidelimit/internal/redistest"
	"github.com/slidelimit/slidelimit/rules"
)

func TestOptions(t *testing.T) {
	t.Parallel()
	rc := redis.NewClient(&redis.Options{Addr: "127.0.0.1:0"})
	t.Cleanup(func() { rc.Close() })
	for _, o := range []Option{
		WithKeyPrefix("a{b"), WithKeyPrefix("}"), WithNode(-1), WithNode(1024), WithTimeout(0),
		WithFailMode("sideways"), WithFailMode(rules.FailDefault), WithLogger(nil), WithClock(nil), WithLocalKeys(0),
	} {
		var oe *optionError
		if _, err := New(rc, o); !errors.As(err, &oe) || !errors.Is(err, ErrInvalid) {
			t.Errorf("option error %v, want an optionError", err)
		}
	}
	if _, err := New(nil); !errors.Is(err, ErrInvalid) {
		t.Errorf("nil client: %v", err)
	}
	for name, c := range map[string]Client{
		"*redis.Client":         (*redis.Client)(nil),
		"*redis.ClusterClient":  (*redis.ClusterClient)(nil),
		"*redis.Ring":           (*redis.Ring)(nil),
		"redis.UniversalClient": redis.UniversalClient((*redis.Client)(nil)),
	} {
		var oe *optionError
		if e, err := New(c); e != nil || !errors.As(err, &oe) || oe.Option != "client" {
			t.Errorf("typed nil %s: %v %v, want an optionError for the client", name, e, err)
		}
	}
	e, err := New(rc, WithKeyPrefix("x:"), WithNode(1023), WithTimeout(time.Second), WithFailMode(rules.FailOpen),
		WithHashedSubjects([]byte("k")), WithClock(time.Now), WithLocalKeys(5), nil)
	if err != nil {
		t.Fatal(err)
	}
	if e.timeout != time.Second || e.fail != rules.FailOpen || e.keyer.Prefix() != "x:" || e.local.MaxKeys() != 5 {
		t.Errorf("options not applied: %+v", e)
	}
	if e.group != groupAll || groupingOf(redis.NewClusterClient(&redis.ClusterOptions{})) != groupSlot ||
		groupingOf(redis.NewRing(&redis.RingOptions{})) != groupKey {
		t.Error("wrong grouping")
	}
}

func TestInvalidAndEmptyRequests(t *testing.T) {
	t.Parallel()
	rc := redis.NewClient(&redis.Options{Addr: "127.0.0.1:0"})
	t.Cleanup(func() { rc.Close() })
	e := newEngine(t, rc, WithFailMode(rules.FailOpen))
	d, err := e.Allow(context.Background(), req(user("u", win(0, time.Second))))
	if !errors.Is(err, ErrInvalid) || d.Allowed || d.Source != "fail-closed" {
		t.Errorf("invalid request: %+v %v", d, err)
	}
	// Nothing to limit: allowed without asking (the client cannot even
	// connect).
	d, err = e.Allow(context.Background(), req(user("u")))
	if err != nil || !d.Allowed || d.Source != "redis" {
		t.Errorf("request without windows: %+v %v", d, err)
	}
	// A done context decides by the fail mode without asking Redis.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	d, err = e.Allow(ctx, req(user("u", win(1, time.Second))))
	if !errors.Is(err, context.Canceled) || d.Source != "fail-open" {
		t.Errorf("done context: %+v %v", d, err)
	}
	e.Close()
	d, err = e.Allow(context.Background(), req(user("u", win(1, time.Second))))
	if !errors.Is(err, ErrClosed) || d.Source != "fail-open" {
		t.Errorf("after Close: %+v %v", d, err)
	}
	if err := e.resetSubject(context.Background(), "s", rules.Rule{Kind: rules.User}, "u"); !errors.Is(err, ErrClosed) {
		t.Errorf("Reset after Close: %v", err)
	}
}

// TestNoGoroutines checks that an Engine starts no goroutine that outlives
// Close (the client's are the client's).
func TestNoGoroutines(t *testing.T) {
	s, rc := redistest.StartClient(t)
	_ = s
	prefix := redistest.Prefix(t)
	afterTTLs(t, rc, prefix)
	rc.Ping(context.Background()) // let the client start what it starts
	before := runtime.NumGoroutine()
	e, err := New(rc, WithKeyPrefix(prefix))
	if err != nil {
		t.Fatal(err)
	}
	hammer(t, []*Engine{e}, 8, 100*ms, func(int) Request { return req(user("u", win(1000, time.Second))) })
	e.Close()
	for range 100 {
		if runtime.NumGoroutine() <= before {
			return
		}
		time.Sleep(10 * ms)
	}
	buf := make([]byte, 1<<16)
	t.Fatalf("%d goroutines after Close, %d before:\n%s", runtime.NumGoroutine(), before, buf[:runtime.Stack(buf, true)])
}

func TestFailModeDefault(t *testing.T) {
	t.Parallel()
	rc := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"}) // never dialled
	t.Cleanup(func() { rc.Close() })
	for _, tt := range []struct {
		opts []Option
		want rules.FailMode
	}{
		{nil, rules.FailLocal},
		{[]Option{WithFailMode(rules.FailClosed)}, rules.FailClosed},
		{[]Option{WithFailMode(rules.FailOpen)}, rules.FailOpen},
	} {
		e := newEngine(t, rc, tt.opts...)
		if got := e.fail; got != tt.want {
			t.Errorf("FailMode() with %d options = %q, want %q", len(tt.opts), got, tt.want)
		}
	}
}

func TestSourceString(t *testing.T) {
	t.Parallel()
	for s, want := range map[source]string{
		fromRedis: "redis", fromFailOpen: "fail-open", fromFailClosed: "fail-closed", fromLocal: "local", 42: "source(42)",
	} {
		if got := s.String(); got != want || (s < 42 && sourceNamed(got) != s) {
			t.Errorf("source(%d).String() = %q, want %q", s, got, want)
		}
	}
}
