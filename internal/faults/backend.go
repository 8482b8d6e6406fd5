package faults

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/slidelimit/slidelimit/internal/redistest"
)

// Backend is a store the fault harnesses can hurt: the engine's (routes)
// and the root package's (throttles) run their histories on the same
// three, through the same faults.
type Backend struct {
	Name    string
	Caps    Caps
	Timeout time.Duration                // the engine timeout a history runs with
	Client  func() redis.UniversalClient // a new client, as a new process has
	Kill    func(node int)
	Restart func(node int, empty bool)
	Alive   func(node int) bool
	// Sleep starts a DEBUG SLEEP of d and returns a function waiting for
	// its end; nil when the backend cannot.
	Sleep func(d time.Duration) (wait func())
	Evict func() error // nil when the backend cannot
	// Healthy waits until a healed backend serves every key; nil: at once.
	Healthy func() error
	// Serves reports whether node n serves key (a cluster's master); nil:
	// every node serves every key.
	Serves func(n int, key string) bool
	// Failover says a killed master's replica takes over: the writes it
	// had not replicated may be lost at the kill, and a restart loses
	// nothing more (the node rejoins as a replica).
	Failover bool
	// Mini is the in-process miniredis of the miniredis backend, nil for
	// the others.
	Mini *miniredis.Miniredis
}

// RedisClient returns a client configured as docs/engine.md asks.
func RedisClient(addr string) *redis.Client {
	return redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true, MaxRetries: -1, DialerRetries: 1})
}

// MiniredisBackend is an in-process miniredis: Close stands for a kill (its data
// stays, as with persistence), FlushAll before Restart for a restart
// without it.
func MiniredisBackend(t testing.TB) *Backend {
	m := miniredis.NewMiniRedis()
	if err := m.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(m.Close)
	up := true
	addr := m.Addr()
	return &Backend{
		Name: "miniredis",
		Caps: Caps{Persist: true, Nodes: 1},
		// Only a kill makes it fail; a slow machine must not.
		Timeout: 2 * time.Second,
		Client:  func() redis.UniversalClient { return RedisClient(addr) },
		Kill:    func(int) { m.Close(); up = false },
		Restart: func(_ int, empty bool) {
			if empty {
				m.FlushAll()
			}
			if err := m.Restart(); err != nil {
				t.Fatalf("miniredis restart: %v", err)
			}
			up = true
		},
		Alive: func(int) bool { return up },
		Mini:  m,
	}
}

// RedisBackend is a real redis-server with an append-only file fsynced at every
// write, so that a restart keeps every admission (a restart empty flushes
// it before any engine's request), and the DEBUG command for DEBUG SLEEP.
func RedisBackend(t testing.TB) *Backend {
	s := redistest.StartWith(t, "--appendonly", "yes", "--appendfsync", "always", "--enable-debug-command", "local")
	admin := RedisClient(s.Addr)
	t.Cleanup(func() { admin.Close() })
	ctx := context.Background()
	return &Backend{
		Name: "redis",
		Caps: Caps{Persist: true, Sleep: true, Evict: true, Nodes: 1},
		// Long enough for a loaded machine most of the time; a timeout is
		// a fail-mode decision the model bounds anyway.
		Timeout: 200 * time.Millisecond,
		Client:  func() redis.UniversalClient { return RedisClient(s.Addr) },
		Kill:    func(int) { s.Kill() },
		Restart: func(_ int, empty bool) {
			s.Restart()
			if empty {
				if err := admin.FlushAll(ctx).Err(); err != nil {
					t.Fatalf("flushall: %v", err)
				}
			}
		},
		Alive: func(int) bool { return s.Alive() },
		Sleep: func(d time.Duration) func() {
			c := RedisClient(s.Addr)
			done := make(chan struct{})
			go func() {
				defer close(done)
				c.Do(context.Background(), "debug", "sleep", fmt.Sprintf("%.3f", d.Seconds()))
				c.Close()
			}()
			// Let it reach the server before the next step's requests.
			time.Sleep(20 * time.Millisecond)
			return func() { <-done }
		},
		Evict: func() error { return EvictSome(ctx, admin) },
	}
}

// EvictSome makes the server evict keys: an evicting policy, memory capped
// at what it uses, and junk written until keys go.
func EvictSome(ctx context.Context, admin *redis.Client) error {
	info, err := admin.Info(ctx, "memory").Result()
	if err != nil {
		return err
	}
	used := ""
	for _, l := range strings.Split(info, "\r\n") {
		if v, ok := strings.CutPrefix(l, "used_memory:"); ok {
			used = v
		}
	}
	if err := admin.ConfigSet(ctx, "maxmemory-policy", "allkeys-random").Err(); err != nil {
		return err
	}
	if err := admin.ConfigSet(ctx, "maxmemory", used).Err(); err != nil {
		return err
	}
	junk := strings.Repeat("x", 4096)
	var keys []string
	for i := range 64 {
		k := fmt.Sprintf("junk:%d", i)
		keys = append(keys, k)
		admin.Set(ctx, k, junk, time.Minute)
	}
	if err := admin.ConfigSet(ctx, "maxmemory", "0").Err(); err != nil {
		return err
	}
	if err := admin.ConfigSet(ctx, "maxmemory-policy", "noeviction").Err(); err != nil {
		return err
	}
	return admin.Del(ctx, keys...).Err()
}

// ClusterBackend is a 3-master Redis Cluster without persistence. Without
// replicas a killed master's subjects go to the fail mode until it
// restarts, empty, with its hash slots; with them (failover) its replica
// takes over in about 2 s, and the master restarts as a replica.
func ClusterBackend(t testing.TB, failover bool) *Backend {
	// The configuration docs/engine.md asks for: the healthy masters keep
	// answering while one is down.
	cfg := redistest.ClusterConfig{}
	name := "cluster"
	if failover {
		cfg.Replicas, name = 1, "failover"
	}
	cl := redistest.StartClusterConfig(t, cfg)
	addrs := cl.Addrs()
	return &Backend{
		Name:     name,
		Failover: failover,
		Caps:     Caps{Nodes: 3}, // the masters at the start
		Timeout:  200 * time.Millisecond,
		Client: func() redis.UniversalClient {
			return redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs, ContextTimeoutEnabled: true,
				MaxRetries: -1, DialerRetries: 1, ClusterStateReloadInterval: 200 * time.Millisecond})
		},
		Kill: func(n int) { cl.Nodes[n].Kill() },
		Restart: func(n int, _ bool) {
			cl.Nodes[n].Restart()
		},
		Alive: func(n int) bool { return cl.Nodes[n].Alive() },
		Serves: func(n int, key string) bool {
			return cl.MasterOf(t, key) == cl.Nodes[n]
		},
		Healthy: func() error {
			for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(20 * time.Millisecond) {
				err := cl.Healthy()
				if err == nil || time.Now().After(deadline) {
					return err
				}
			}
		},
	}
}
