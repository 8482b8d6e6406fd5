package main

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
)

// variant is one ClusterOptions setting under test.
type variant struct {
	name        string
	opt         redis.ClusterOptions
	reloadOnErr bool // call ReloadState after a failed command
	ctxTimeout  time.Duration
}

func routingVariants() []variant {
	return []variant{
		{name: "defaults", ctxTimeout: 100 * time.Millisecond},
		{name: "defaults + ReloadState on error", reloadOnErr: true, ctxTimeout: 100 * time.Millisecond},
		{name: "ClusterStateReloadInterval 1s", opt: redis.ClusterOptions{ClusterStateReloadInterval: time.Second}, ctxTimeout: 100 * time.Millisecond},
		{name: "ClusterStateReloadInterval 200ms", opt: redis.ClusterOptions{ClusterStateReloadInterval: 200 * time.Millisecond}, ctxTimeout: 100 * time.Millisecond},
		{name: "200ms + ContextTimeoutEnabled", opt: redis.ClusterOptions{
			ClusterStateReloadInterval: 200 * time.Millisecond, ContextTimeoutEnabled: true,
		}, ctxTimeout: 100 * time.Millisecond},
		{name: "200ms + ContextTimeoutEnabled + DialerRetries 1", opt: redis.ClusterOptions{
			ClusterStateReloadInterval: 200 * time.Millisecond, ContextTimeoutEnabled: true, DialerRetries: 1,
		}, ctxTimeout: 100 * time.Millisecond},
		{name: "200ms + ContextTimeoutEnabled + MaxRedirects -1 + DialerRetries 1", opt: redis.ClusterOptions{
			ClusterStateReloadInterval: 200 * time.Millisecond, ContextTimeoutEnabled: true, MaxRedirects: -1, DialerRetries: 1,
		}, ctxTimeout: 100 * time.Millisecond},
		{name: "200ms + ReloadState on error + ContextTimeoutEnabled + MaxRedirects -1 + DialerRetries 1", opt: redis.ClusterOptions{
			ClusterStateReloadInterval: 200 * time.Millisecond, ContextTimeoutEnabled: true, MaxRedirects: -1, DialerRetries: 1,
		}, reloadOnErr: true, ctxTimeout: 100 * time.Millisecond},
	}
}

// sendHook records when a node client is handed a command.
type sendHook struct {
	addr string
	last *sync.Map // addr -> time.Time
}

func (h sendHook) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h sendHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return next // CLUSTER SLOTS of a state reload tries the dead node too: not counted
}
func (h sendHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		h.last.Store(h.addr, time.Now())
		return next(ctx, cmds)
	}
}

// routeResult is what one variant saw around one SIGKILL.
type routeResult struct {
	lastDead    time.Duration // last command handed to the dead node, after the kill
	firstOK     time.Duration // first success on the dead node's key after the kill
	deadErrs    int           // failed commands on the dead node's key
	deadErrMean time.Duration // mean Exec time of a pipeline whose dead-node command failed
	otherCmds   int           // commands on the healthy masters' keys after the kill
	otherErrs   int           // ... that failed
	otherErrTxt map[string]int
}

// keysOnMasters returns one key per master, the first on victim.
func keysOnMasters(c *cluster) (keys []string, victim *node) {
	seen := map[*node]bool{}
	for i := 0; len(keys) < 3; i++ {
		k := fmt.Sprintf("route:%d", i)
		m := c.masterOf(k)
		if m == nil || seen[m] {
			continue
		}
		seen[m] = true
		keys = append(keys, k)
		if victim == nil {
			victim = m
		}
	}
	return keys, victim
}

// runRouting starts a cluster, runs every variant's client concurrently
// (a pipeline of SETs on one key per master every 5 ms, with a context
// timeout per pipeline like the engine's), SIGKILLs one master after 1 s and
// watches for maxWait.
func runRouting(maxWait time.Duration) error {
	c, err := startCluster()
	if err != nil {
		return err
	}
	defer c.stop()
	keys, victim := keysOnMasters(c)
	vs := routingVariants()
	results := make([]routeResult, len(vs))
	var killedAt atomic.Pointer[time.Time]
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for i, v := range vs {
		o := v.opt
		o.Addrs = c.addrs()
		cc := redis.NewClusterClient(&o)
		defer cc.Close()
		last := &sync.Map{}
		cc.OnNewNode(func(rdb *redis.Client) { rdb.AddHook(sendHook{addr: rdb.Options().Addr, last: last}) })
		r := &results[i]
		r.otherErrTxt = map[string]int{}
		wg.Go(func() {
			var errSum time.Duration
			okSince := time.Time{}
			for {
				select {
				case <-stop:
					if n := r.deadErrs; n > 0 {
						r.deadErrMean = errSum / time.Duration(n)
					}
					if t, ok := last.Load(victim.addr); ok {
						if k := killedAt.Load(); k != nil && t.(time.Time).After(*k) {
							r.lastDead = t.(time.Time).Sub(*k)
						}
					}
					return
				default:
				}
				ctx, cancel := context.WithTimeout(context.Background(), v.ctxTimeout)
				start := time.Now()
				pipe := cc.Pipeline()
				cmds := make([]*redis.StatusCmd, len(keys))
				for j, k := range keys {
					cmds[j] = pipe.Set(ctx, k, "v", 0)
				}
				_, _ = pipe.Exec(ctx)
				took := time.Since(start)
				cancel()
				k := killedAt.Load()
				if k != nil {
					if err := cmds[0].Err(); err != nil {
						r.deadErrs++
						errSum += took
						okSince = time.Time{}
						if v.reloadOnErr {
							cc.ReloadState(context.Background())
						}
					} else {
						if r.firstOK == 0 {
							r.firstOK = time.Since(*k)
						}
						if okSince.IsZero() {
							okSince = time.Now()
						}
					}
					for _, cmd := range cmds[1:] {
						r.otherCmds++
						if err := cmd.Err(); err != nil {
							r.otherErrs++
							r.otherErrTxt[shortErr(err)]++
						}
					}
				} else if v.reloadOnErr && cmds[0].Err() != nil {
					cc.ReloadState(context.Background())
				}
				time.Sleep(5 * time.Millisecond)
			}
		})
	}
	time.Sleep(time.Second)
	now := time.Now()
	killedAt.Store(&now)
	victim.kill()
	healthyAfter, err := c.waitHealthy(15 * time.Second)
	if err != nil {
		close(stop)
		wg.Wait()
		return err
	}
	healthyAfter = time.Since(now) // includes the polling
	// The default client needs up to ClusterStateReloadInterval (60 s) to
	// find the promoted replica: watch for maxWait.
	time.Sleep(time.Until(now.Add(maxWait)))
	close(stop)
	wg.Wait()
	fmt.Printf("\ncluster healthy (cluster_state:ok everywhere, slots on the promoted replica) %v after SIGKILL\n\n",
		healthyAfter.Round(10*time.Millisecond))
	fmt.Println("| client options (ctx timeout 100 ms per pipeline) | last pipeline sent to the dead node | first success on its key | failed pipelines on its key | mean time of such a failure | healthy masters' commands failed |")
	fmt.Println("|---|---|---|---|---|---|")
	for i, v := range vs {
		r := results[i]
		fo := "never (cap " + maxWait.String() + ")"
		if r.firstOK > 0 {
			fo = r.firstOK.Round(10 * time.Millisecond).String()
		}
		fmt.Printf("| %s | %v | %s | %d | %v | %d of %d %s |\n", v.name, r.lastDead.Round(10*time.Millisecond), fo,
			r.deadErrs, r.deadErrMean.Round(time.Millisecond), r.otherErrs, r.otherCmds, fmtErrs(r.otherErrTxt))
	}
	return nil
}

func shortErr(err error) string {
	s := err.Error()
	switch {
	case strings.Contains(s, "connection refused"):
		return "connection refused"
	case strings.Contains(s, "context deadline exceeded"):
		return "context deadline exceeded"
	case strings.Contains(s, "i/o timeout"):
		return "i/o timeout"
	case strings.Contains(s, "EOF"):
		return "EOF"
	}
	if len(s) > 40 {
		s = s[:40]
	}
	return s
}

func fmtErrs(m map[string]int) string {
	if len(m) == 0 {
		return ""
	}
	var ks []string
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	var b strings.Builder
	b.WriteString("(")
	for i, k := range ks {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%s: %d", k, m[k])
	}
	b.WriteString(")")
	return b.String()
}

// runHung stops one master with SIGSTOP for 600 ms (below the node timeout,
// so no failover) and reports, per client setting, how many commands of the
// healthy masters failed in cross-node pipelines that also held a command
// for the stopped master.
func runHung() error {
	c, err := startCluster()
	if err != nil {
		return err
	}
	defer c.stop()
	type hv struct {
		name string
		opt  redis.ClusterOptions
	}
	hvs := []hv{
		{"ContextTimeoutEnabled", redis.ClusterOptions{ContextTimeoutEnabled: true}},
		{"ContextTimeoutEnabled + MaxRedirects -1", redis.ClusterOptions{ContextTimeoutEnabled: true, MaxRedirects: -1}},
		{"ReadTimeout 50ms + MaxRedirects -1", redis.ClusterOptions{ReadTimeout: 50 * time.Millisecond, MaxRedirects: -1}},
		{"ReadTimeout 50ms (MaxRedirects 3)", redis.ClusterOptions{ReadTimeout: 50 * time.Millisecond}},
		// Last: its Exec blocks for ReadTimeout (5 s), longer than the node
		// timeout, so the stopped master is failed over.
		{"defaults (ReadTimeout 5 s, ContextTimeoutEnabled false)", redis.ClusterOptions{}},
	}
	fmt.Println("\n| hung master (SIGSTOP 600 ms), ctx 100 ms per pipeline | pipelines with a failed command for it | healthy masters' commands failed in them | their errors | longest Exec |")
	fmt.Println("|---|---|---|---|---|")
	for _, h := range hvs {
		keys, victim := keysOnMasters(c)
		o := h.opt
		o.Addrs = c.addrs()
		cc := redis.NewClusterClient(&o)
		ctx := context.Background()
		for _, k := range keys { // warm up the connections
			cc.Set(ctx, k, "v", 0)
		}
		victim.mu.Lock()
		pid := victim.cmd.Process.Pid
		victim.mu.Unlock()
		syscall.Kill(pid, syscall.SIGSTOP)
		stopAt := time.Now()
		var failed, otherFailed int
		var longest time.Duration
		errs := map[string]int{}
		for time.Since(stopAt) < 600*time.Millisecond {
			ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
			pipe := cc.Pipeline()
			cmds := make([]*redis.StatusCmd, len(keys))
			for j, k := range keys {
				cmds[j] = pipe.Set(ctx, k, "v", 0)
			}
			start := time.Now()
			_, _ = pipe.Exec(ctx)
			longest = max(longest, time.Since(start))
			cancel()
			if cmds[0].Err() != nil {
				failed++
				for _, cmd := range cmds[1:] {
					if err := cmd.Err(); err != nil {
						otherFailed++
						errs[shortErr(err)]++
					}
				}
			}
		}
		syscall.Kill(pid, syscall.SIGCONT)
		fmt.Printf("| %s | %d | %d of %d | %s | %v |\n", h.name, failed, otherFailed, 2*failed, fmtErrs(errs), longest.Round(time.Millisecond))
		cc.Close()
		time.Sleep(1500 * time.Millisecond) // let the node and its links recover
		if _, err := c.waitHealthy(10 * time.Second); err != nil {
			return err
		}
	}
	return nil
}
