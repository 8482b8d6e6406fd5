package embedded

import (
	"context"
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/slidelimit/slidelimit/engine"
	"github.com/slidelimit/slidelimit/internal/testutil"
	"github.com/slidelimit/slidelimit/rules"
)

func start(t *testing.T) (*Store, *redis.Client) {
	t.Helper()
	s, err := Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	c := redis.NewClient(&redis.Options{Addr: s.Addr(), ContextTimeoutEnabled: true})
	t.Cleanup(func() { c.Close() })
	return s, c
}

// waitGone polls until no key matches pattern, failing after 10 s; it
// returns when the keys were seen gone.
func waitGone(t *testing.T, c *redis.Client, pattern string) time.Time {
	t.Helper()
	ctx := context.Background()
	deadline := time.Now().Add(10 * time.Second)
	for {
		keys, err := c.Keys(ctx, pattern).Result()
		if err != nil {
			t.Fatal(err)
		}
		now := time.Now()
		if len(keys) == 0 {
			return now
		}
		if now.After(deadline) {
			t.Fatalf("keys %q still there 10 s later", keys)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestKeysExpire: a key set with PX disappears after its time and not
// much before, and its PTTL counts down; a key without an
// expiry stays. A plain miniredis keeps both for good.
func TestKeysExpire(t *testing.T) {
	_, c := start(t)
	ctx := context.Background()
	begin := time.Now()
	if err := c.Set(ctx, "short", "1", time.Second).Err(); err != nil {
		t.Fatal(err)
	}
	if err := c.Set(ctx, "forever", "1", 0).Err(); err != nil {
		t.Fatal(err)
	}
	first, err := c.PTTL(ctx, "short").Result()
	if err != nil {
		t.Fatal(err)
	}
	if first <= 0 || first > time.Second {
		t.Fatalf("PTTL right after SET PX 1000 = %v", first)
	}
	// PTTL counts down with the real clock.
	deadline := time.Now().Add(5 * time.Second)
	for {
		d, err := c.PTTL(ctx, "short").Result()
		if err != nil {
			t.Fatal(err)
		}
		if d > 0 && d < first {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("PTTL still %v 5 s after it was %v", d, first)
		}
		time.Sleep(time.Millisecond)
	}
	// Not early: the time to live counts down with the real clock.
	gone := waitGone(t, c, "short")
	if after := gone.Sub(begin); after < time.Second {
		t.Errorf("a key of PX 1000 gone %v after it was set", after)
	}
	if n, err := c.Exists(ctx, "forever").Result(); err != nil || n != 1 {
		t.Errorf("the key without an expiry: EXISTS = %d, %v", n, err)
	}
}

// TestEngineKeysExpire: the keys the engine writes (a window, a block:
// rule's block) go once their time has passed, so the store holds only
// the live windows.
func TestEngineKeysExpire(t *testing.T) {
	_, c := start(t)
	ctx := context.Background()
	eng := testutil.NewEngine(t, c, engine.WithKeyPrefix("exp:"))
	req := engine.One("login", rules.Key, "alice", rules.Window{Limit: 1, Period: 200 * time.Millisecond})
	req.Checks[0].Block = 400 * time.Millisecond
	if d, err := eng.Allow(ctx, req); err != nil || !d.Allowed {
		t.Fatalf("first: %+v, %v", d, err)
	}
	blocked := time.Now() // the block starts after this
	if d, err := eng.Allow(ctx, req); err != nil || d.Allowed {
		t.Fatalf("second: %+v, %v; want denied and blocked", d, err)
	}
	keys, err := c.Keys(ctx, "exp:*").Result()
	if err != nil || len(keys) == 0 {
		t.Fatalf("keys after the block: %q, %v", keys, err)
	}
	if after := waitGone(t, c, "exp:*").Sub(blocked); after < 300*time.Millisecond {
		t.Errorf("the keys of a 400 ms block gone %v after it started", after)
	}
	// And the engine admits again once the block is over.
	deadline := time.Now().Add(5 * time.Second)
	for {
		d, err := eng.Allow(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		if d.Allowed {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("still denied 5 s after a 400 ms block: %+v", d)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestCloseStops: Close ends the server, and may be called twice.
func TestCloseStops(t *testing.T) {
	s, err := Start()
	if err != nil {
		t.Fatal(err)
	}
	addr := s.Addr()
	s.Close()
	s.Close()
	if conn, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
		conn.Close()
		t.Fatal("the store still accepts connections after Close")
	}
}

// BenchmarkGet measures a command on a store holding 10,000 keys with an
// expiry: each command counts their times to live down first.
func BenchmarkGet(b *testing.B) {
	s, err := Start()
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	c := redis.NewClient(&redis.Options{Addr: s.Addr()})
	defer c.Close()
	ctx := context.Background()
	for _, n := range []int{0, 10_000} {
		for i := range n {
			k := "k" + strconv.Itoa(i)
			s.m.Set(k, "1")
			s.m.SetTTL(k, time.Hour)
		}
		b.Run(strconv.Itoa(n)+"keys", func(b *testing.B) {
			for b.Loop() {
				if err := c.Get(ctx, "k0").Err(); err != nil && err != redis.Nil {
					b.Fatal(err)
				}
			}
		})
	}
}
