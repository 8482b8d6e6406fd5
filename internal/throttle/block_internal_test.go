package throttle

import (
	"context"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/slidelimit/slidelimit/engine"
)

// TestThrottleHeardBlockCapped: a block longer than the cap, in Redis (a
// process with a longer cap, or a version without one, wrote it) or in a
// message, holds a lane at most the cap, and the key is shortened to it
// so that renewals do not hold the lane anew.
func TestThrottleHeardBlockCapped(t *testing.T) {
	mr := miniredis.RunT(t)
	client := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	t.Cleanup(func() { client.Close() })
	lim, err := newLimiter(client, WithEngineOptions(engine.WithKeyPrefix("capped:")))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lim.Close() })
	th, err := lim.Throttle("api", "global:10/s")
	if err != nil {
		t.Fatal(err)
	}
	th.Transport(nil, TransportConfig{MaxBlock: 10 * time.Minute}) // below the default: the default holds
	th.Transport(nil, TransportConfig{MaxBlock: 2 * time.Hour})    // the largest cap holds
	const maxHeld = 2 * time.Hour
	ctx := context.Background()
	ln, err := th.lane(ctx, "lane")
	if err != nil {
		t.Fatal(err)
	}
	blocked := func() time.Duration {
		ln.mu.Lock()
		defer ln.mu.Unlock()
		return time.Until(ln.blocked)
	}
	key := th.fleet.keys(ln)[2]
	if err := client.Set(ctx, key, "1", 31*365*24*time.Hour).Err(); err != nil {
		t.Fatal(err)
	}
	th.fleet.learn(ln)
	if d := blocked(); d <= maxHeld-time.Minute || d > maxHeld {
		t.Errorf("held for %v after reading a block of 31 years, want %v", d, maxHeld)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		if d := mr.TTL(key); d > 0 && d <= maxHeld {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the block's key still has %v left, want at most %v", mr.TTL(key), maxHeld)
		}
		time.Sleep(10 * time.Millisecond)
	}

	ln2, err := th.lane(ctx, "other lane")
	if err != nil {
		t.Fatal(err)
	}
	th.fleet.message(ln2, []string{"b", ln2.id, "999999999999"})
	ln2.mu.Lock()
	left := time.Until(ln2.blocked)
	ln2.mu.Unlock()
	if left <= maxHeld-time.Minute || left > maxHeld {
		t.Errorf("held for %v after a message of 31 years, want %v", left, maxHeld)
	}
}
