package redistest_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/slidelimit/slidelimit/internal/redistest"
)

// keysPerMaster returns, for each master now, one key it serves.
func keysPerMaster(t *testing.T, cl *redistest.Cluster) map[*redistest.Server]string {
	t.Helper()
	keys := map[*redistest.Server]string{}
	for i := 0; len(keys) < 3 && i < 1000; i++ {
		k := fmt.Sprintf("k%d", i)
		m := cl.MasterOf(t, k)
		if m == nil {
			t.Fatalf("no master for %q in a healthy cluster", k)
		}
		if _, ok := keys[m]; !ok {
			keys[m] = k
		}
	}
	if len(keys) != 3 {
		t.Fatalf("keys found on %d masters, want 3", len(keys))
	}
	return keys
}

func TestClusterReplicasFailover(t *testing.T) {
	t.Parallel()
	start := time.Now()
	cl := redistest.StartClusterReplicas(t)
	t.Logf("3+3 cluster up in %v", time.Since(start).Round(time.Millisecond))
	masters, replicas := cl.Masters(t), cl.Replicas(t)
	if len(masters) != 3 || len(replicas) != 3 || len(cl.Nodes) != 6 {
		t.Fatalf("masters=%d replicas=%d nodes=%d, want 3 3 6", len(masters), len(replicas), len(cl.Nodes))
	}
	for _, s := range cl.Nodes {
		c := s.Client()
		cfg, err := c.ConfigGet(context.Background(), "cluster-*").Result()
		if err != nil {
			t.Fatal(err)
		}
		if cfg["cluster-node-timeout"] != "1000" || cfg["cluster-require-full-coverage"] != "no" {
			t.Fatalf("%s: config %v, want node-timeout 1000 and require-full-coverage no", s.Addr, cfg)
		}
	}

	keys := keysPerMaster(t, cl)
	ctx := context.Background()
	for m, k := range keys {
		c := m.Client()
		if err := c.Set(ctx, k, "v", 0).Err(); err != nil {
			t.Fatal(err)
		}
		// Make sure the replica has it before the master dies.
		if n, err := c.Do(ctx, "WAIT", 1, 2000).Int(); err != nil || n != 1 {
			t.Fatalf("WAIT on %s: %d %v, want 1", m.Addr, n, err)
		}
	}

	var victim *redistest.Server
	var vkey string
	for m, k := range keys {
		victim, vkey = m, k
		break
	}
	pid := victim.Pid()
	if got := cl.KillMasterOf(t, vkey); got != victim {
		t.Fatalf("KillMasterOf killed %s, want %s", got.Addr, victim.Addr)
	}
	if victim.Alive() || victim.Pid() != 0 {
		t.Fatal("killed node still alive")
	}
	if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
		t.Fatalf("pid %d after Kill: %v, want ESRCH (killed and reaped)", pid, err)
	}
	if cl.Healthy() == nil {
		t.Fatal("cluster healthy right after a master was killed")
	}
	took := cl.WaitHealthy(t, 15*time.Second)
	t.Logf("healthy again %v after SIGKILL", took.Round(time.Millisecond))

	promoted := cl.MasterOf(t, vkey)
	if promoted == nil || promoted == victim || !slices.Contains(replicas, promoted) {
		t.Fatalf("slot of %q served by %v, want a former replica", vkey, promoted)
	}
	if m, r := cl.Masters(t), cl.Replicas(t); len(m) != 3 || len(r) != 2 || !slices.Contains(m, promoted) {
		t.Fatalf("after failover masters=%d replicas=%d, want 3 and 2 with the promoted one a master", len(m), len(r))
	}
	if v, err := promoted.Client().Get(ctx, vkey).Result(); err != nil || v != "v" {
		t.Fatalf("GET %q on promoted master: %q %v", vkey, v, err)
	}
	// A cluster client finds the new master as well.
	cc := cl.ClientWith(t, &redis.ClusterOptions{ClusterStateReloadInterval: 200 * time.Millisecond})
	deadline := time.Now().Add(5 * time.Second)
	for {
		v, err := cc.Get(ctx, vkey).Result()
		if err == nil && v == "v" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("cluster client GET %q: %q %v", vkey, v, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestClusterCleanup checks that a cluster's processes are gone (killed and
// reaped) once its test has ended.
func TestClusterCleanup(t *testing.T) {
	t.Parallel()
	var pids []int
	t.Run("cluster", func(t *testing.T) {
		cl := redistest.StartClusterReplicas(t)
		for _, s := range cl.Nodes {
			pids = append(pids, s.Pid())
		}
	})
	if len(pids) != 6 {
		t.Fatalf("pids=%v, want 6", pids)
	}
	for _, pid := range pids {
		if pid == 0 {
			t.Fatal("node without a process")
		}
		if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
			t.Errorf("pid %d after cleanup: %v, want ESRCH", pid, err)
		}
	}
}

// clusterDown polls, every 5 ms until the cluster is healthy again after one
// master is killed, a key on each healthy master, and counts the replies
// that are CLUSTERDOWN errors and those that are other errors.
func clusterDown(t *testing.T, cfg redistest.ClusterConfig) (down, other, ok int, took, downFor time.Duration) {
	t.Helper()
	cl := redistest.StartClusterConfig(t, cfg)
	keys := keysPerMaster(t, cl)
	var victim *redistest.Server
	clients := map[string]*redis.Client{}
	for m, k := range keys {
		if victim == nil {
			victim = m
			continue
		}
		clients[k] = m.Client()
	}
	ctx := context.Background()
	victim.Kill()
	start := time.Now()
	var first, last time.Time
	for cl.Healthy() != nil {
		if time.Since(start) > 15*time.Second {
			t.Fatalf("no failover after 15 s: %v", cl.Healthy())
		}
		for k, c := range clients {
			err := c.Set(ctx, k, "v", 0).Err()
			switch {
			case err == nil:
				ok++
			case strings.HasPrefix(err.Error(), "CLUSTERDOWN"):
				down++
				if first.IsZero() {
					first = time.Now()
				}
				last = time.Now()
			default:
				other++
				t.Logf("other error: %v", err)
			}
		}
		time.Sleep(5 * time.Millisecond)
	}
	if down > 0 {
		downFor = last.Sub(first)
	}
	return down, other, ok, time.Since(start), downFor
}

// TestClusterDownDuringFailover shows why StartClusterReplicas sets
// cluster-require-full-coverage no: with it, the healthy masters keep
// answering while a dead master's replica is promoted; with the default
// (yes) they answer CLUSTERDOWN for a while.
func TestClusterDownDuringFailover(t *testing.T) {
	t.Parallel()
	down, other, ok, took, _ := clusterDown(t, redistest.ClusterConfig{Replicas: 1})
	t.Logf("full coverage no: %d CLUSTERDOWN, %d other errors, %d ok on healthy masters during a %v failover", down, other, ok, took.Round(time.Millisecond))
	if down != 0 || other != 0 || ok == 0 {
		t.Errorf("healthy masters with full coverage no: %d CLUSTERDOWN, %d other errors, %d ok; want 0 0 >0", down, other, ok)
	}
	down, other, ok, took, downFor := clusterDown(t, redistest.ClusterConfig{Replicas: 1, FullCoverage: true})
	t.Logf("full coverage yes: %d CLUSTERDOWN (first to last %v), %d other errors, %d ok on healthy masters during a %v failover", down, downFor.Round(time.Millisecond), other, ok, took.Round(time.Millisecond))
	if down == 0 {
		t.Errorf("healthy masters with full coverage yes never answered CLUSTERDOWN (%d ok); the default should refuse while a slot has no master", ok)
	}
}
