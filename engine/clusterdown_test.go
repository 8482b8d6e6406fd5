package engine

import (
	"context"
	"errors"
	"log/slog"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/slidelimit/slidelimit/engine/internal/eviction"
	"github.com/slidelimit/slidelimit/internal/redistest"
)

// TestClusterMasterDown checks the down state per master on a Redis
// Cluster without replicas (cluster-require-full-coverage no): while one
// master is stopped, the calls that need it decide by the fail mode at
// once and the others keep deciding in Redis; after a restart its calls
// come back to Redis. It also checks that the eviction guard reads every
// master: one of them, set to allkeys-lru with maxmemory, is named in the
// warning.
func TestClusterMasterDown(t *testing.T) {
	t.Parallel()
	const timeout = 2 * time.Second
	cl := redistest.StartClusterConfig(t, redistest.ClusterConfig{})
	ctx := context.Background()
	cc := cl.ClientWith(t, &redis.ClusterOptions{ContextTimeoutEnabled: true, DialerRetries: 1, MaxRetries: -1,
		ClusterStateReloadInterval: 200 * time.Millisecond})
	prefix := redistest.Prefix(t)
	probe := newEngine(t, cc, WithKeyPrefix(prefix))

	// Two subjects on different masters, and the third master evicting.
	var a, b Request
	var ma, mb *redistest.Server
	for i := 0; mb == nil; i++ {
		r := req(user("s"+strconv.Itoa(i), win(1000, time.Minute)))
		m := cl.MasterOf(t, probe.keyOf("s", r.Checks[0]))
		switch {
		case ma == nil:
			a, ma = r, m
		case m != ma:
			b, mb = r, m
		}
	}
	var evicting *redistest.Server
	for _, n := range cl.Nodes {
		if n != ma && n != mb {
			evicting = n
		}
	}
	ec := redis.NewClient(&redis.Options{Addr: evicting.Addr})
	t.Cleanup(func() { ec.Close() })
	if err := ec.ConfigSet(ctx, "maxmemory-policy", "allkeys-lru").Err(); err != nil {
		t.Fatal(err)
	}
	if err := ec.ConfigSet(ctx, "maxmemory", "100mb").Err(); err != nil {
		t.Fatal(err)
	}

	h := &recordHandler{}
	e := newEngine(t, cc, WithKeyPrefix(prefix), WithTimeout(timeout), WithLogger(slog.New(h)))
	if w := h.matching("may evict"); len(w) != 1 || w[0].attrs["server"].String() != evicting.Addr {
		t.Errorf("eviction warnings %+v, want one naming %s", w, evicting.Addr)
	}
	if _, err := New(cc, WithRequireNoEviction()); !errors.Is(err, eviction.ErrMayEvict) {
		t.Errorf("New with WithRequireNoEviction: %v, want eviction.ErrMayEvict", err)
	}
	mustAllow(t, e, a, true)
	mustAllow(t, e, b, true)

	ma.Kill()
	start := time.Now()
	d, err := e.Allow(ctx, a)
	t.Logf("first call for the stopped master: %v, %v, %v", time.Since(start), d.Source, err)
	if d.Source != "local" || !errors.Is(err, ErrBackend) {
		t.Fatalf("first call for the stopped master: %v %v", d.Source, err)
	}
	for i := range 50 {
		start := time.Now()
		d, err := e.Allow(ctx, a)
		if el := time.Since(start); el > timeout/2 {
			t.Errorf("call %d for the stopped master took %v", i, el)
		}
		if d.Source != "local" || !errors.Is(err, errNotAsked) {
			t.Fatalf("call %d for the stopped master: %v %v, want local and errNotAsked", i, d.Source, err)
		}
		if d, err := e.Allow(ctx, b); d.Source != "redis" || err != nil {
			t.Fatalf("call %d for a healthy master: %v %v", i, d.Source, err)
		}
	}

	ma.Restart()
	restarted := time.Now()
	for {
		d, err := e.Allow(ctx, a)
		if err == nil && d.Source == "redis" {
			break
		}
		if time.Since(restarted) > 10*time.Second {
			t.Fatalf("no decision from Redis 10 s after the master's restart: %v %v", d.Source, err)
		}
		time.Sleep(5 * ms)
	}
	t.Logf("back on Redis %v after the master's restart", time.Since(restarted))
}
