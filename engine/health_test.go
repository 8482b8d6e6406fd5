package engine

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/slidelimit/slidelimit/internal/redistest"
	"github.com/slidelimit/slidelimit/rules"
)

// TestProbeBesidePool checks that the probes of a down server do not dial
// through the client's pool. go-redis's pool stops dialing after PoolSize
// failed dials in a row and then dials only once a second, so probes
// through it left the engine behind a restarted server after a long
// outage (1.5-1.6 s after a 35 s one). Here more probes than PoolSize
// fail, and the pool still dials the restarted server at once.
func TestProbeBesidePool(t *testing.T) {
	t.Parallel()
	s := redistest.Start(t)
	rc := redis.NewClient(&redis.Options{Addr: s.Addr, ContextTimeoutEnabled: true, DialerRetries: 1, MaxRetries: -1, PoolSize: 4})
	t.Cleanup(func() { rc.Close() })
	// A killed server refuses connections at once: the test needs no
	// short timeout, and the default 100 ms timed out the first Allow on
	// a loaded machine.
	e, err := New(rc, WithKeyPrefix(redistest.Prefix(t)), WithFailMode(rules.FailLocal), WithTimeout(5*time.Second),
		WithLogger(slog.New(slog.DiscardHandler)), withEvictionCheck(0))
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	r := req(user("u", win(100_000, time.Minute)))
	mustAllow(t, e, r, true)

	s.Kill()
	if d, _ := e.Allow(context.Background(), r); d.Source != "local" {
		t.Fatalf("after the kill: %v", d.Source)
	}
	// Probes at 0, 50, 150, 350, 750 and 1550 ms: more than PoolSize.
	time.Sleep(1600 * time.Millisecond)
	s.Restart()
	// The pool still dials: it did not count the probes' failures.
	if err := rc.Ping(context.Background()).Err(); err != nil {
		t.Errorf("the client's pool does not dial a restarted server: %v", err)
	}
	restarted := time.Now()
	for {
		d, err := e.Allow(context.Background(), r)
		if err == nil && d.Source == "redis" {
			break
		}
		if time.Since(restarted) > 5*time.Second {
			t.Fatalf("no decision from Redis 5 s after the restart: %v %v", d.Source, err)
		}
		time.Sleep(time.Millisecond)
	}
	t.Logf("back on Redis %v after the restart answered PING", time.Since(restarted))
}
