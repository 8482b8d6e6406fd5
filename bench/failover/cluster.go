package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// node is one redis-server process of the cluster (a minimal copy of the
// main module's internal/redistest, which bench cannot import).
type node struct {
	addr string
	dir  string

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{}
}

// cluster is a 3-master + 3-replica Redis Cluster on loopback.
type cluster struct {
	nodes []*node
	dir   string
}

// freePort returns a free loopback port below 55536 whose cluster bus port
// (+10000) is free too.
func freePort(used map[int]bool) (int, error) {
	for range 200 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return 0, err
		}
		port := l.Addr().(*net.TCPAddr).Port
		l.Close()
		if port > 55000 || used[port] {
			continue
		}
		bus, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(port+10000))
		if err != nil {
			continue
		}
		bus.Close()
		used[port] = true
		return port, nil
	}
	return 0, errors.New("no free port")
}

// startCluster starts 3 masters + 3 replicas with cluster-node-timeout 1000
// ms and cluster-require-full-coverage no, and waits until it is healthy and
// every replica is in sync.
func startCluster() (*cluster, error) {
	dir, err := os.MkdirTemp("", "slidelimit-failover-")
	if err != nil {
		return nil, err
	}
	c := &cluster{dir: dir}
	used := map[int]bool{}
	for i := range 6 {
		port, err := freePort(used)
		if err != nil {
			c.stop()
			return nil, err
		}
		nd := filepath.Join(dir, strconv.Itoa(i))
		if err := os.Mkdir(nd, 0o755); err != nil {
			c.stop()
			return nil, err
		}
		c.nodes = append(c.nodes, &node{addr: "127.0.0.1:" + strconv.Itoa(port), dir: nd})
	}
	errs := make([]error, len(c.nodes))
	var wg sync.WaitGroup
	for i, n := range c.nodes {
		wg.Go(func() { errs[i] = n.start() })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		c.stop()
		return nil, err
	}
	args := []string{"--cluster", "create"}
	for _, n := range c.nodes {
		args = append(args, n.addr)
	}
	args = append(args, "--cluster-replicas", "1", "--cluster-yes")
	if out, err := exec.Command("redis-cli", args...).CombinedOutput(); err != nil {
		c.stop()
		return nil, fmt.Errorf("redis-cli --cluster create: %v\n%s", err, out)
	}
	if _, err := c.waitHealthy(20 * time.Second); err != nil {
		c.stop()
		return nil, err
	}
	deadline := time.Now().Add(20 * time.Second)
	for _, n := range c.nodes {
		for {
			info, err := call(n, func(ctx context.Context, cl *redis.Client) (string, error) {
				return cl.Info(ctx, "replication").Result()
			})
			if err == nil && (strings.Contains(info, "role:master") || strings.Contains(info, "master_link_status:up")) {
				break
			}
			if time.Now().After(deadline) {
				c.stop()
				return nil, fmt.Errorf("replica %s not in sync: %v", n.addr, err)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	return c, nil
}

func (n *node) start() error {
	port := n.addr[strings.LastIndexByte(n.addr, ':')+1:]
	cmd := exec.Command("redis-server", "--port", port, "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no", "--dir", n.dir, "--protected-mode", "no",
		"--loglevel", "warning", "--cluster-enabled", "yes",
		"--cluster-config-file", filepath.Join(n.dir, "nodes.conf"),
		"--cluster-node-timeout", "1000", "--cluster-require-full-coverage", "no",
		"--repl-diskless-sync", "yes", "--repl-diskless-sync-delay", "0")
	log, err := os.Create(filepath.Join(n.dir, "redis.log"))
	if err != nil {
		return err
	}
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		log.Close()
		return err
	}
	done := make(chan struct{})
	n.mu.Lock()
	n.cmd, n.done = cmd, done
	n.mu.Unlock()
	go func() { cmd.Wait(); log.Close(); close(done) }()
	deadline := time.Now().Add(10 * time.Second)
	for {
		_, err := call(n, func(ctx context.Context, cl *redis.Client) (string, error) { return cl.Ping(ctx).Result() })
		if err == nil {
			return nil
		}
		select {
		case <-done:
			return fmt.Errorf("redis-server %s exited (log in %s)", n.addr, n.dir)
		default:
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("redis-server %s did not answer: %v", n.addr, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// kill sends SIGKILL and reaps the process.
func (n *node) kill() {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.cmd != nil {
		n.cmd.Process.Kill()
		<-n.done
		n.cmd = nil
	}
}

func (n *node) alive() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.cmd != nil
}

func (c *cluster) stop() {
	for _, n := range c.nodes {
		n.kill()
	}
	os.RemoveAll(c.dir)
}

func (c *cluster) addrs() []string {
	var a []string
	for _, n := range c.nodes {
		a = append(a, n.addr)
	}
	return a
}

func (c *cluster) live() []*node {
	var l []*node
	for _, n := range c.nodes {
		if n.alive() {
			l = append(l, n)
		}
	}
	return l
}

func call[T any](n *node, fn func(context.Context, *redis.Client) (T, error)) (T, error) {
	cl := redis.NewClient(&redis.Options{Addr: n.addr, MaxRetries: -1, DialTimeout: 300 * time.Millisecond,
		ReadTimeout: time.Second, WriteTimeout: time.Second})
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	return fn(ctx, cl)
}

// myself returns whether n is a master and the slot ranges it claims.
func myself(n *node) (master bool, slots [][2]int, err error) {
	out, err := call(n, func(ctx context.Context, cl *redis.Client) (string, error) { return cl.ClusterNodes(ctx).Result() })
	if err != nil {
		return false, nil, err
	}
	for line := range strings.Lines(out) {
		f := strings.Fields(line)
		if len(f) < 8 || !slices.Contains(strings.Split(f[2], ","), "myself") {
			continue
		}
		master = slices.Contains(strings.Split(f[2], ","), "master")
		for _, r := range f[8:] {
			if strings.HasPrefix(r, "[") {
				continue
			}
			lo, hi, ok := strings.Cut(r, "-")
			a, _ := strconv.Atoi(lo)
			b := a
			if ok {
				b, _ = strconv.Atoi(hi)
			}
			slots = append(slots, [2]int{a, b})
		}
		return master, slots, nil
	}
	return false, nil, fmt.Errorf("%s: no myself line", n.addr)
}

// masterOf returns the live master claiming key's slot, or nil.
func (c *cluster) masterOf(key string) *node {
	var slot int64 = -1
	for _, n := range c.live() {
		s, err := call(n, func(ctx context.Context, cl *redis.Client) (int64, error) {
			return cl.ClusterKeySlot(ctx, key).Result()
		})
		if err == nil {
			slot = s
			break
		}
	}
	for _, n := range c.live() {
		m, slots, err := myself(n)
		if err != nil || !m {
			continue
		}
		for _, r := range slots {
			if int64(r[0]) <= slot && slot <= int64(r[1]) {
				return n
			}
		}
	}
	return nil
}

// healthy reports nil when every live node says cluster_state:ok and every
// slot is claimed by a live master and routed to it by every live node.
func (c *cluster) healthy() error {
	owner := make([]string, 16384)
	live := c.live()
	for _, n := range live {
		info, err := call(n, func(ctx context.Context, cl *redis.Client) (string, error) { return cl.ClusterInfo(ctx).Result() })
		if err != nil || !strings.Contains(info, "cluster_state:ok") {
			return fmt.Errorf("%s: not ok (%v)", n.addr, err)
		}
		m, slots, err := myself(n)
		if err != nil {
			return err
		}
		if m {
			for _, r := range slots {
				for i := r[0]; i <= r[1]; i++ {
					owner[i] = n.addr
				}
			}
		}
	}
	for i, o := range owner {
		if o == "" {
			return fmt.Errorf("slot %d has no live master", i)
		}
	}
	for _, n := range live {
		slots, err := call(n, func(ctx context.Context, cl *redis.Client) ([]redis.ClusterSlot, error) {
			return cl.ClusterSlots(ctx).Result()
		})
		if err != nil {
			return err
		}
		for _, r := range slots {
			if len(r.Nodes) == 0 || owner[r.Start] != r.Nodes[0].Addr {
				return fmt.Errorf("%s routes slot %d elsewhere", n.addr, r.Start)
			}
		}
	}
	return nil
}

func (c *cluster) waitHealthy(timeout time.Duration) (time.Duration, error) {
	start := time.Now()
	for {
		err := c.healthy()
		if err == nil {
			return time.Since(start), nil
		}
		if time.Since(start) > timeout {
			return 0, fmt.Errorf("cluster not healthy after %v: %v", timeout, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
