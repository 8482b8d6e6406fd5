package redistest

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// NumSlots is the number of hash slots of a Redis Cluster.
const NumSlots = 16384

// Cluster is a Redis Cluster started by a test: masters, and replicas when
// started with StartClusterReplicas or StartClusterConfig.
type Cluster struct {
	// Nodes holds every node in start order: the masters first, then the
	// replicas (roles change after a failover; see Masters and Replicas).
	Nodes []*Server

	tb testing.TB
}

// ClusterConfig describes a cluster for StartClusterConfig.
type ClusterConfig struct {
	// Masters is the number of masters; 0 means 3.
	Masters int
	// Replicas is the number of replicas of each master.
	Replicas int
	// NodeTimeout is cluster-node-timeout: how long a node must be
	// unreachable before it is marked failed. 0 means 1 s.
	NodeTimeout time.Duration
	// FullCoverage sets cluster-require-full-coverage yes (the Redis
	// default): while any slot has no live master, every node answers
	// CLUSTERDOWN, also for slots it serves. False sets it to no, so that the
	// healthy masters keep answering during a failover.
	FullCoverage bool
}

// Addrs returns the nodes' addresses.
func (c *Cluster) Addrs() []string {
	a := make([]string, len(c.Nodes))
	for i, n := range c.Nodes {
		a[i] = n.Addr
	}
	return a
}

// Client returns a cluster client with default options, closed when the
// test ends.
func (c *Cluster) Client(tb testing.TB) *redis.ClusterClient {
	return c.ClientWith(tb, &redis.ClusterOptions{})
}

// ClientWith returns a cluster client with the given options, whose Addrs
// are set to the cluster's nodes; it is closed when the test ends.
func (c *Cluster) ClientWith(tb testing.TB, opt *redis.ClusterOptions) *redis.ClusterClient {
	o := *opt
	o.Addrs = c.Addrs()
	cc := redis.NewClusterClient(&o)
	tb.Cleanup(func() { cc.Close() })
	return cc
}

// StartCluster starts a Redis Cluster of three masters (no replicas) with
// redis-cli --cluster create and waits until every node reports
// cluster_state:ok. It stops every node when the test ends.
func StartCluster(tb testing.TB) *Cluster {
	tb.Helper()
	return StartClusterConfig(tb, ClusterConfig{FullCoverage: true})
}

// StartClusterReplicas starts a Redis Cluster of three masters with one
// replica each, cluster-node-timeout 1000 ms and
// cluster-require-full-coverage no, and waits until every node reports
// cluster_state:ok and every replica is in sync with its master. After a
// master is killed, its replica is promoted in about 2 s (see WaitHealthy).
// It stops every node when the test ends.
func StartClusterReplicas(tb testing.TB) *Cluster {
	tb.Helper()
	return StartClusterConfig(tb, ClusterConfig{Replicas: 1})
}

// StartClusterConfig starts a Redis Cluster described by cfg and waits
// until it is healthy (see WaitHealthy) and every replica is in sync. It
// stops every node when the test ends.
func StartClusterConfig(tb testing.TB, cfg ClusterConfig) *Cluster {
	tb.Helper()
	binaries(tb, "redis-server", "redis-cli")
	if cfg.Masters == 0 {
		cfg.Masters = 3
	}
	if cfg.NodeTimeout == 0 {
		cfg.NodeTimeout = time.Second
	}
	if cfg.Masters < 3 || cfg.Replicas < 0 {
		tb.Fatalf("redistest: a cluster needs at least 3 masters and 0 or more replicas, got %d and %d", cfg.Masters, cfg.Replicas)
	}
	extra := []string{"--cluster-node-timeout", strconv.FormatInt(cfg.NodeTimeout.Milliseconds(), 10)}
	if !cfg.FullCoverage {
		extra = append(extra, "--cluster-require-full-coverage", "no")
	}
	if cfg.Replicas > 0 {
		// Without it the first full sync of each replica waits 5 s.
		extra = append(extra, "--repl-diskless-sync", "yes", "--repl-diskless-sync-delay", "0")
	}
	c := &Cluster{tb: tb}
	n := cfg.Masters * (1 + cfg.Replicas)
	used := map[string]bool{}
	for len(c.Nodes) < n {
		s := newServer(tb, true, extra...)
		if used[s.Addr] { // freePort may hand out a port twice
			continue
		}
		used[s.Addr] = true
		c.Nodes = append(c.Nodes, s)
	}
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i, s := range c.Nodes {
		wg.Go(func() { errs[i] = s.first() })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		tb.Fatal(err)
	}
	args := append([]string{"--cluster", "create"}, c.Addrs()...)
	args = append(args, "--cluster-replicas", strconv.Itoa(cfg.Replicas), "--cluster-yes")
	out, err := exec.Command("redis-cli", args...).CombinedOutput()
	if err != nil {
		tb.Fatalf("redistest: redis-cli --cluster create: %v\n%s", err, out)
	}
	c.WaitHealthy(tb, 20*time.Second)
	if cfg.Replicas > 0 {
		c.waitReplicasInSync(tb, 20*time.Second)
	}
	return c
}

// Live returns the nodes whose process runs (not killed).
func (c *Cluster) Live() []*Server {
	var l []*Server
	for _, n := range c.Nodes {
		if n.Alive() {
			l = append(l, n)
		}
	}
	return l
}

// node is one line of CLUSTER NODES.
type node struct {
	id, addr, master string
	flags            []string
	slots            [][2]int // inclusive ranges
}

func (n node) is(flag string) bool { return slices.Contains(n.flags, flag) }

func parseNodes(s string) []node {
	var ns []node
	for line := range strings.Lines(s) {
		f := strings.Fields(line)
		if len(f) < 8 {
			continue
		}
		addr, _, _ := strings.Cut(f[1], "@")
		n := node{id: f[0], addr: addr, flags: strings.Split(f[2], ","), master: f[3]}
		for _, r := range f[8:] {
			if strings.HasPrefix(r, "[") { // a slot being migrated or imported
				continue
			}
			lo, hi, ok := strings.Cut(r, "-")
			a, err1 := strconv.Atoi(lo)
			b := a
			var err2 error
			if ok {
				b, err2 = strconv.Atoi(hi)
			}
			if err1 == nil && err2 == nil {
				n.slots = append(n.slots, [2]int{a, b})
			}
		}
		ns = append(ns, n)
	}
	return ns
}

// call runs fn with a short-lived plain client to s.
func call[T any](s *Server, fn func(context.Context, *redis.Client) (T, error)) (T, error) {
	cl := redis.NewClient(&redis.Options{Addr: s.Addr, MaxRetries: -1, DialTimeout: 300 * time.Millisecond,
		ReadTimeout: 500 * time.Millisecond, WriteTimeout: 500 * time.Millisecond})
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	return fn(ctx, cl)
}

// myself returns the node's own line of CLUSTER NODES: its id, role and,
// for a master, the slots it claims.
func myself(s *Server) (node, error) {
	out, err := call(s, func(ctx context.Context, cl *redis.Client) (string, error) {
		return cl.ClusterNodes(ctx).Result()
	})
	if err != nil {
		return node{}, err
	}
	for _, n := range parseNodes(out) {
		if n.is("myself") {
			return n, nil
		}
	}
	return node{}, fmt.Errorf("redistest: no myself line in CLUSTER NODES of %s", s.Addr)
}

// Masters returns the live nodes that are masters now, by their own account.
func (c *Cluster) Masters(tb testing.TB) []*Server {
	tb.Helper()
	return c.byRole(tb, "master")
}

// Replicas returns the live nodes that are replicas now, by their own account.
func (c *Cluster) Replicas(tb testing.TB) []*Server {
	tb.Helper()
	return c.byRole(tb, "slave")
}

func (c *Cluster) byRole(tb testing.TB, role string) []*Server {
	tb.Helper()
	var r []*Server
	for _, s := range c.Live() {
		me, err := myself(s)
		if err != nil {
			tb.Fatalf("redistest: %s: %v", s.Addr, err)
		}
		if me.is(role) {
			r = append(r, s)
		}
	}
	return r
}

// Slot returns the hash slot of key (asked of a live node: CLUSTER KEYSLOT).
func (c *Cluster) Slot(tb testing.TB, key string) int {
	tb.Helper()
	for _, s := range c.Live() {
		slot, err := call(s, func(ctx context.Context, cl *redis.Client) (int64, error) {
			return cl.ClusterKeySlot(ctx, key).Result()
		})
		if err == nil {
			return int(slot)
		}
	}
	tb.Fatalf("redistest: no live node answered CLUSTER KEYSLOT %q", key)
	return 0
}

// MasterOfSlot returns the live master that serves slot now, by its own
// account (the slots on its "myself" line of CLUSTER NODES), or nil when no
// live master claims it (between the death of a master and the promotion of
// its replica).
func (c *Cluster) MasterOfSlot(tb testing.TB, slot int) *Server {
	tb.Helper()
	for _, s := range c.Live() {
		me, err := myself(s)
		if err != nil {
			continue // dying or overloaded: not serving
		}
		if !me.is("master") {
			continue
		}
		for _, r := range me.slots {
			if r[0] <= slot && slot <= r[1] {
				return s
			}
		}
	}
	return nil
}

// MasterOf returns the live master that serves key now, or nil (see
// MasterOfSlot).
func (c *Cluster) MasterOf(tb testing.TB, key string) *Server {
	tb.Helper()
	return c.MasterOfSlot(tb, c.Slot(tb, key))
}

// KillMasterOf kills (SIGKILL, and reaps) the master that serves key now and
// returns it.
func (c *Cluster) KillMasterOf(tb testing.TB, key string) *Server {
	tb.Helper()
	m := c.MasterOf(tb, key)
	if m == nil {
		tb.Fatalf("redistest: no live master serves %q", key)
	}
	m.Kill()
	return m
}

// Healthy reports whether the cluster is whole again: every live node says
// cluster_state:ok, every slot is claimed by exactly one live master, and
// every live node's CLUSTER SLOTS view maps every slot to that master (so
// the slots of a killed master are served by its promoted replica, and no
// node still routes them to the dead one). The error says what is missing.
func (c *Cluster) Healthy() error {
	live := c.Live()
	owner := make([]string, NumSlots)
	for _, s := range live {
		info, err := call(s, func(ctx context.Context, cl *redis.Client) (string, error) {
			return cl.ClusterInfo(ctx).Result()
		})
		if err != nil {
			return fmt.Errorf("%s: cluster info: %v", s.Addr, err)
		}
		if !strings.Contains(info, "cluster_state:ok") {
			return fmt.Errorf("%s: cluster_state is not ok", s.Addr)
		}
		me, err := myself(s)
		if err != nil {
			return err
		}
		if !me.is("master") {
			continue
		}
		for _, r := range me.slots {
			for i := r[0]; i <= r[1]; i++ {
				if owner[i] != "" {
					return fmt.Errorf("slot %d claimed by %s and %s", i, owner[i], s.Addr)
				}
				owner[i] = s.Addr
			}
		}
	}
	for i, o := range owner {
		if o == "" {
			return fmt.Errorf("slot %d has no live master", i)
		}
	}
	for _, s := range live {
		slots, err := call(s, func(ctx context.Context, cl *redis.Client) ([]redis.ClusterSlot, error) {
			return cl.ClusterSlots(ctx).Result()
		})
		if err != nil {
			return fmt.Errorf("%s: cluster slots: %v", s.Addr, err)
		}
		seen := 0
		for _, r := range slots {
			if len(r.Nodes) == 0 {
				return fmt.Errorf("%s: slots %d-%d without nodes", s.Addr, r.Start, r.End)
			}
			for i := r.Start; i <= r.End; i++ {
				if owner[i] != r.Nodes[0].Addr {
					return fmt.Errorf("%s routes slot %d to %s, served by %s", s.Addr, i, r.Nodes[0].Addr, owner[i])
				}
			}
			seen += r.End - r.Start + 1
		}
		if seen != NumSlots {
			return fmt.Errorf("%s routes %d slots, want %d", s.Addr, seen, NumSlots)
		}
	}
	return nil
}

// WaitHealthy waits until Healthy reports no error, polling every 20 ms,
// and returns how long it waited; it fails the test after timeout.
func (c *Cluster) WaitHealthy(tb testing.TB, timeout time.Duration) time.Duration {
	tb.Helper()
	start := time.Now()
	for {
		err := c.Healthy()
		if err == nil {
			return time.Since(start)
		}
		if time.Since(start) > timeout {
			tb.Fatalf("redistest: cluster not healthy after %v: %v", timeout, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// waitReplicasInSync waits until every replica reports master_link_status:up.
func (c *Cluster) waitReplicasInSync(tb testing.TB, timeout time.Duration) {
	tb.Helper()
	deadline := time.Now().Add(timeout)
	for _, s := range c.Replicas(tb) {
		for {
			info, err := call(s, func(ctx context.Context, cl *redis.Client) (string, error) {
				return cl.Info(ctx, "replication").Result()
			})
			if err == nil && strings.Contains(info, "master_link_status:up") {
				break
			}
			if time.Now().After(deadline) {
				tb.Fatalf("redistest: replica %s not in sync: %v %q", s.Addr, err, info)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
}
