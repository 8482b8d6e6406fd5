package engine

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/slidelimit/slidelimit/internal/faults"
	"github.com/slidelimit/slidelimit/internal/redistest"
)

// miniredisBackend is an in-process miniredis: Close stands for a kill
// (its data stays, as with persistence), FlushAll before Restart for a
// restart without it.
func miniredisBackend(t *testing.T) *faultBackend {
	m := miniredis.NewMiniRedis()
	if err := m.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(m.Close)
	up := true
	addr := m.Addr()
	return &faultBackend{
		name: "miniredis",
		caps: faults.Caps{Persist: true, Nodes: 1},
		// Only a kill makes it fail; a slow machine must not.
		timeout: 2 * time.Second,
		client:  func() Client { return redisClient(addr) },
		kill:    func(int) { m.Close(); up = false },
		restart: func(_ int, empty bool) {
			if empty {
				m.FlushAll()
			}
			if err := m.Restart(); err != nil {
				t.Fatalf("miniredis restart: %v", err)
			}
			up = true
		},
		alive: func(int) bool { return up },
	}
}

// redisBackend is a real redis-server with an append-only file fsynced at
// every write, so that a restart keeps every admission (a restart empty
// flushes it before any engine's request), and the DEBUG command for
// DEBUG SLEEP.
func redisBackend(t *testing.T) *faultBackend {
	s := redistest.StartWith(t, "--appendonly", "yes", "--appendfsync", "always", "--enable-debug-command", "local")
	admin := redisClient(s.Addr)
	t.Cleanup(func() { admin.Close() })
	ctx := context.Background()
	return &faultBackend{
		name: "redis",
		caps: faults.Caps{Persist: true, Sleep: true, Evict: true, Nodes: 1},
		// Long enough for a loaded machine most of the time; a timeout is
		// a fail-mode decision the model bounds anyway.
		timeout: 200 * time.Millisecond,
		client:  func() Client { return redisClient(s.Addr) },
		kill:    func(int) { s.Kill() },
		restart: func(_ int, empty bool) {
			s.Restart()
			if empty {
				if err := admin.FlushAll(ctx).Err(); err != nil {
					t.Fatalf("flushall: %v", err)
				}
			}
		},
		alive: func(int) bool { return s.Alive() },
		sleep: func(d time.Duration) func() {
			c := redisClient(s.Addr)
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
		evict: func() error { return evictSome(ctx, admin) },
	}
}

// evictSome makes the server evict keys: an evicting policy, memory capped
// at what it uses, and junk written until keys go.
func evictSome(ctx context.Context, admin *redis.Client) error {
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

// clusterBackend is a 3-master Redis Cluster without persistence. Without
// replicas a killed master's subjects go to the fail mode until it
// restarts, empty, with its hash slots; with them (failover) its replica
// takes over in about 2 s, and the master restarts as a replica.
func clusterBackend(t *testing.T, failover bool) *faultBackend {
	// The configuration docs/engine.md asks for: the healthy masters keep
	// answering while one is down.
	cfg := redistest.ClusterConfig{}
	name := "cluster"
	if failover {
		cfg.Replicas, name = 1, "failover"
	}
	cl := redistest.StartClusterConfig(t, cfg)
	addrs := cl.Addrs()
	return &faultBackend{
		name:     name,
		failover: failover,
		caps:     faults.Caps{Nodes: 3}, // the masters at the start
		timeout:  200 * time.Millisecond,
		client: func() Client {
			return redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs, ContextTimeoutEnabled: true,
				MaxRetries: -1, DialerRetries: 1, ClusterStateReloadInterval: 200 * time.Millisecond})
		},
		kill: func(n int) { cl.Nodes[n].Kill() },
		restart: func(n int, _ bool) {
			cl.Nodes[n].Restart()
		},
		alive: func(n int) bool { return cl.Nodes[n].Alive() },
		serves: func(n int, key string) bool {
			return cl.MasterOf(t, key) == cl.Nodes[n]
		},
		healthy: func() error {
			for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(20 * time.Millisecond) {
				err := cl.Healthy()
				if err == nil || time.Now().After(deadline) {
					return err
				}
			}
		},
	}
}
