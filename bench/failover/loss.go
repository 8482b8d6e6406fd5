package main

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/slidelimit/slidelimit/engine"
	"github.com/slidelimit/slidelimit/rules"
)

// ack is one admission Redis acknowledged: a script reply that says the
// member was added.
type ack struct {
	member string
	at     time.Time
}

// recorder is a ClusterClient hook that records, from every successful
// EVALSHA/EVAL reply of the engine's cluster path (one op per call), the
// key and member the script added. It must be the outermost hook so that it
// sees what the engine sees.
type recorder struct {
	mu   sync.Mutex
	acks map[string][]ack // key -> admissions
}

func (r *recorder) DialHook(next redis.DialHook) redis.DialHook          { return next }
func (r *recorder) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }
func (r *recorder) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		now := time.Now()
		for _, cmd := range cmds {
			if !isScript(cmd) || cmd.Err() != nil {
				continue
			}
			c, ok := cmd.(*redis.Cmd)
			if !ok {
				continue
			}
			reply, _ := c.Text()
			f := strings.Fields(reply)
			if len(f) < 3 {
				continue
			}
			code, _ := strconv.Atoi(f[2])
			if code%4 != 1 { // not admitted
				continue
			}
			args := cmd.Args()
			if n, _ := args[2].(int); n != 1 {
				continue // the engine's cluster path with one key per request
			}
			key := fmt.Sprint(args[3])
			member, ok := memberOf(args[len(args)-1])
			if !ok {
				continue
			}
			if s := code / 4; s > 0 {
				member += "." + strconv.Itoa(s)
			}
			r.mu.Lock()
			r.acks[key] = append(r.acks[key], ack{member: member, at: now})
			r.mu.Unlock()
		}
		return err
	}
}

func isScript(cmd redis.Cmder) bool {
	n := cmd.Name()
	return n == "evalsha" || n == "eval"
}

// memberOf reads the member from the script argument [t,1,mode,"member",...].
func memberOf(a any) (string, bool) {
	var b []byte
	switch v := a.(type) {
	case []byte:
		b = v
	case string:
		b = []byte(v)
	default:
		return "", false
	}
	i := bytes.IndexByte(b, '"')
	if i < 0 {
		return "", false
	}
	j := bytes.IndexByte(b[i+1:], '"')
	if j < 0 {
		return "", false
	}
	return string(b[i+1 : i+1+j]), true
}

// waiter is a ClusterClient hook that sends each pipeline's script calls
// itself, per master, each node's calls followed by WAIT replicas timeout
// on the same connection, and fails the calls of a node whose WAIT reports
// fewer replicas (or errs). It replaces go-redis's cluster pipeline for
// script-only pipelines, so it does not follow MOVED.
type waiter struct {
	cc       *redis.ClusterClient
	replicas int
	timeout  time.Duration
	waits    atomic.Int64
	short    atomic.Int64 // WAITs that reported fewer replicas or failed
}

func (w *waiter) DialHook(next redis.DialHook) redis.DialHook          { return next }
func (w *waiter) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }
func (w *waiter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if !slices.ContainsFunc(cmds, isScript) || slices.ContainsFunc(cmds, func(c redis.Cmder) bool { return !isScript(c) }) {
			return next(ctx, cmds)
		}
		byNode := map[*redis.Client][]redis.Cmder{}
		for _, cmd := range cmds {
			node, err := w.cc.MasterForKey(ctx, fmt.Sprint(cmd.Args()[3]))
			if err != nil {
				cmd.SetErr(err)
				continue
			}
			byNode[node] = append(byNode[node], cmd)
		}
		var wg sync.WaitGroup
		for node, cs := range byNode {
			wg.Go(func() {
				pipe := node.Pipeline()
				for _, c := range cs {
					_ = pipe.Process(ctx, c)
				}
				if w.replicas == 0 { // the control: the same hook without WAIT
					_, _ = pipe.Exec(ctx)
					return
				}
				wait := pipe.Do(ctx, "WAIT", w.replicas, w.timeout.Milliseconds())
				_, _ = pipe.Exec(ctx)
				w.waits.Add(1)
				n, err := wait.Int()
				if err == nil && n >= w.replicas {
					return
				}
				w.short.Add(1)
				if err == nil {
					err = fmt.Errorf("wait: %d of %d replicas acknowledged", n, w.replicas)
				}
				for _, c := range cs {
					if c.Err() == nil {
						c.SetErr(err)
					}
				}
			})
		}
		wg.Wait()
		for _, c := range cmds {
			if err := c.Err(); err != nil {
				return err
			}
		}
		return nil
	}
}

// clusterOptions are the client options of the loss and cost runs: the
// ones README.md recommends.
func clusterOptions(addrs []string) *redis.ClusterOptions {
	return &redis.ClusterOptions{Addrs: addrs, ClusterStateReloadInterval: 200 * time.Millisecond, ContextTimeoutEnabled: true}
}

var window = rules.Window{Limit: 1_000_000, Period: time.Minute}

func subject(i int) string { return fmt.Sprintf("s%02d", i) }

type lossResult struct {
	decisions, fromRedis, acked int64 // decisions; from Redis; Allowed from Redis
	hookAcks                    int   // admissions seen in script replies
	victimAcks, lost            int   // on the killed master's keys; not stored after the failover
	lostAge                     []time.Duration
	healthy                     time.Duration
	waits, shortWaits           int64
	phase                       [3]string // from Redis / all: before the kill, until healthy, after
}

// lossRun runs 16 goroutines of Allow on 30 subjects, SIGKILLs the master of
// one key after 2 s, keeps going 8 s and counts, per key, the acknowledged
// admissions missing from the sorted set on the new master.
func lossRun(withWait bool) (lossResult, error) {
	var res lossResult
	c, err := startCluster()
	if err != nil {
		return res, err
	}
	defer c.stop()
	cc := redis.NewClusterClient(clusterOptions(c.addrs()))
	defer cc.Close()
	rec := &recorder{acks: map[string][]ack{}}
	cc.AddHook(rec)
	var w *waiter
	if withWait {
		w = &waiter{cc: cc, replicas: 1, timeout: 50 * time.Millisecond}
		cc.AddHook(w)
	}
	eng, err := engine.New(cc)
	if err != nil {
		return res, err
	}
	defer eng.Close()

	var stop atomic.Bool
	var decisions, fromRedis, acked atomic.Int64
	var phase atomic.Int32 // 0 before the kill, 1 until healthy, 2 after
	var phaseAll, phaseRedis [3]atomic.Int64
	var wg sync.WaitGroup
	for g := range 16 {
		wg.Go(func() {
			for i := g; !stop.Load(); i++ {
				d, _ := eng.Allow(context.Background(), engine.One("failover", rules.User, subject(i%30), window))
				decisions.Add(1)
				p := phase.Load()
				phaseAll[p].Add(1)
				if d.Source == "redis" {
					fromRedis.Add(1)
					phaseRedis[p].Add(1)
					if d.Allowed {
						acked.Add(1)
					}
				}
			}
		})
	}
	time.Sleep(2 * time.Second)
	rec.mu.Lock()
	var anyKey string
	for k := range rec.acks {
		anyKey = k
		break
	}
	rec.mu.Unlock()
	victim := c.masterOf(anyKey)
	if victim == nil {
		stop.Store(true)
		wg.Wait()
		return res, fmt.Errorf("no master for %q", anyKey)
	}
	killed := time.Now()
	phase.Store(1)
	victim.kill()
	healthy, err := c.waitHealthy(15 * time.Second)
	phase.Store(2)
	if err != nil {
		stop.Store(true)
		wg.Wait()
		return res, err
	}
	res.healthy = healthy
	time.Sleep(time.Until(killed.Add(8 * time.Second)))
	stop.Store(true)
	wg.Wait()
	res.decisions, res.fromRedis, res.acked = decisions.Load(), fromRedis.Load(), acked.Load()
	for i := range 3 {
		res.phase[i] = fmt.Sprintf("%d/%d", phaseRedis[i].Load(), phaseAll[i].Load())
	}
	if w != nil {
		res.waits, res.shortWaits = w.waits.Load(), w.short.Load()
	}

	promoted := c.masterOf(anyKey)
	rec.mu.Lock()
	defer rec.mu.Unlock()
	for key, acks := range rec.acks {
		res.hookAcks += len(acks)
		m := c.masterOf(key)
		if m == nil {
			return res, fmt.Errorf("no master for %q after the failover", key)
		}
		stored, err := call(m, func(ctx context.Context, cl *redis.Client) ([]string, error) {
			return cl.ZRange(ctx, key, 0, -1).Result()
		})
		if err != nil {
			return res, err
		}
		set := map[string]bool{}
		for _, s := range stored {
			set[s] = true
		}
		var lost int
		for _, a := range acks {
			if !set[a.member] {
				lost++
				res.lostAge = append(res.lostAge, killed.Sub(a.at))
			}
		}
		if m == promoted {
			res.victimAcks += len(acks)
		}
		res.lost += lost
	}
	return res, nil
}

func runLoss(runs int) error {
	fmt.Println("\n| run | WAIT 1 50ms after each script call | decisions | from Redis | acknowledged admissions (engine / replies) | of which on the killed master's keys | lost (not on the new master) | lost were acknowledged this long before the kill | cluster healthy after | WAITs short of 1 replica | from Redis / all: before kill, kill..healthy, after healthy |")
	fmt.Println("|---|---|---|---|---|---|---|---|---|---|---|")
	for _, withWait := range []bool{false, true} {
		for i := range runs {
			r, err := lossRun(withWait)
			if err != nil {
				return err
			}
			ages := "-"
			if len(r.lostAge) > 0 {
				slices.Sort(r.lostAge)
				ages = fmt.Sprintf("%v .. %v", r.lostAge[0].Round(time.Microsecond), r.lostAge[len(r.lostAge)-1].Round(time.Microsecond))
			}
			wait, short := "no", "-"
			if withWait {
				wait, short = "yes", fmt.Sprintf("%d of %d", r.shortWaits, r.waits)
			}
			fmt.Printf("| %d | %s | %d | %d | %d / %d | %d | %d | %s | %v | %s | %s, %s, %s |\n", i+1, wait, r.decisions, r.fromRedis,
				r.acked, r.hookAcks, r.victimAcks, r.lost, ages, r.healthy.Round(10*time.Millisecond), short, r.phase[0], r.phase[1], r.phase[2])
		}
	}
	return nil
}

// runWaitCost measures decisions/s of the engine on a healthy 3+3 cluster
// with and without WAIT after each script call, at 1, 8 and 64 callers.
func runWaitCost(d time.Duration) error {
	c, err := startCluster()
	if err != nil {
		return err
	}
	defer c.stop()
	fmt.Printf("\n| callers | decisions/s, go-redis cluster pipeline | own per-node pipeline hook, no WAIT | same hook + WAIT 1 50ms | cost of WAIT (vs the hook alone) |\n|---|---|---|---|---|\n")
	for _, callers := range []int{1, 8, 64} {
		var rates [3]float64
		for mode := range 3 {
			withWait := mode == 2
			cc := redis.NewClusterClient(clusterOptions(c.addrs()))
			if mode > 0 {
				cc.AddHook(&waiter{cc: cc, replicas: mode - 1, timeout: 50 * time.Millisecond})
			}
			eng, err := engine.New(cc)
			if err != nil {
				return err
			}
			// Warm up: load the script on every master.
			for i := range 30 {
				eng.Allow(context.Background(), engine.One("cost", rules.User, subject(i), window))
			}
			var n, bad atomic.Int64
			var stop atomic.Bool
			var wg sync.WaitGroup
			start := time.Now()
			for g := range callers {
				wg.Go(func() {
					for i := g; !stop.Load(); i++ {
						dec, _ := eng.Allow(context.Background(), engine.One("cost", rules.User, subject(i%30), window))
						if dec.Source == "redis" {
							n.Add(1)
						} else {
							bad.Add(1)
						}
					}
				})
			}
			time.Sleep(d)
			stop.Store(true)
			wg.Wait()
			rates[mode] = float64(n.Load()) / time.Since(start).Seconds()
			if bad.Load() > 0 {
				fmt.Printf("<!-- %d callers, wait=%v: %d decisions not from Redis -->\n", callers, withWait, bad.Load())
			}
			eng.Close()
			cc.Close()
		}
		fmt.Printf("| %d | %.0f | %.0f | %.0f | %.0f%% |\n", callers, rates[0], rates[1], rates[2], 100*(1-rates[2]/rates[1]))
	}
	return nil
}
