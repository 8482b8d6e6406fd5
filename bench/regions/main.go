// Command regions measures one limit kept across regions: it starts three
// redis-servers on free loopback ports, one per region, and a proxy for
// every ordered pair of regions that delays each direction by -delay, then
// a Limiter per region with WithRegions, all deciding one user limited to
// -limit per -window on a route.
//
// It reports, for even traffic, 90/5/5 traffic and even traffic with one
// region cut off from the others for -cut:
//
//   - the most admissions in any window (of -window), and the share of the
//     limit used: admissions over limit × ⌈run / window⌉;
//
//   - replication bytes per admitted request: the bytes the proxies carried
//     both ways, over the admissions;
//
// and, in the same run, the decision time (p50, p99) and throughput of the
// route with and without regions, -workers goroutines on the same Redis,
// in alternating slices of a second: asking for distinct users (every
// request admitted), then for one user at its limit (nearly all denied);
// with the CPU each took per decision: this process (limiters,
// replicators, proxies), the deciding region's redis-server and its
// peers' (applying what it replicates). -cpuprofile profiles those runs,
// labelled by run and mode (pprof -tagfocus regions=on).
//
//	cd bench && go run ./regions -delay 40ms -limit 100 -window 10s -duration 30s
package main

import (
	"context"
	"flag"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"runtime/pprof"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/slidelimit/slidelimit"
	"github.com/slidelimit/slidelimit/bench/internal/redisproc"
	"github.com/slidelimit/slidelimit/engine"
	"github.com/slidelimit/slidelimit/middleware"
)

type config struct {
	delay            time.Duration
	limit            int
	window, duration time.Duration
	cut              time.Duration
	rate             float64
	workers          int
	latency          time.Duration
	redisBin         string
	cpuProfile       string
}

var names = []string{"ap", "eu", "us"}

func main() {
	var c config
	flag.DurationVar(&c.delay, "delay", 40*time.Millisecond, "one-way delay between regions")
	flag.IntVar(&c.limit, "limit", 100, "the user's limit per -window")
	flag.DurationVar(&c.window, "window", 10*time.Second, "the user's window")
	flag.DurationVar(&c.duration, "duration", 30*time.Second, "each traffic run's length")
	flag.DurationVar(&c.cut, "cut", 10*time.Second, "how long a region is cut off in the partition run")
	flag.Float64Var(&c.rate, "rate", 30, "requests per second of the user, all regions together")
	flag.IntVar(&c.workers, "workers", 8, "goroutines of the decision-time run")
	flag.DurationVar(&c.latency, "latency", 10*time.Second, "length of the decision-time run")
	flag.StringVar(&c.redisBin, "redis-server", "redis-server", "the redis-server binary")
	flag.StringVar(&c.cpuProfile, "cpuprofile", "", "write a CPU profile of this process's decision-time runs (not of redis-server) to this file")
	flag.Parse()
	if err := run(c); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

// world is three regions: their servers, the proxies between them, and a
// Limiter per region.
type world struct {
	servers []*redisproc.Server
	links   [][]*proxy // links[from][to]
	clients []*redis.Client
}

func startWorld(c config) (*world, error) {
	w := &world{links: make([][]*proxy, len(names))}
	for range names {
		s, err := redisproc.Start(c.redisBin, "regions")
		if err != nil {
			w.stop()
			return nil, err
		}
		w.servers = append(w.servers, s)
	}
	for from := range names {
		w.links[from] = make([]*proxy, len(names))
		for to := range names {
			if from == to {
				continue
			}
			p, err := startProxy(w.servers[to].Addr, c.delay)
			if err != nil {
				w.stop()
				return nil, err
			}
			w.links[from][to] = p
		}
	}
	return w, nil
}

func (w *world) client(addr string) *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true, DialerRetries: 1, MaxRetries: -1})
	w.clients = append(w.clients, c)
	return c
}

// limiters returns a Limiter per region with regions (or without), under
// prefix, and each one's route deciding rulesText for the user the
// request's X-User names.
func (w *world) limiters(prefix, rulesText string, regions bool) ([]*slidelimit.Limiter, []http.Handler, error) {
	var lims []*slidelimit.Limiter
	var routes []http.Handler
	for i, name := range names {
		opts := []slidelimit.Option{slidelimit.WithKeyPrefix(prefix),
			slidelimit.WithIdentity(func(r *http.Request) (string, []string) { return r.Header.Get("X-User"), nil })}
		if regions {
			peers := map[string]engine.Client{}
			for j, peer := range names {
				if j != i {
					peers[peer] = w.client(w.links[i][j].addr)
				}
			}
			opts = append(opts, slidelimit.WithRegions(slidelimit.Regions{Local: name, Peers: peers}))
		}
		lim, err := slidelimit.New(w.client(w.servers[i].Addr), opts...)
		if err != nil {
			return nil, nil, err
		}
		mw, err := lim.Middleware(rulesText, middleware.WithScope("api"))
		if err != nil {
			return nil, nil, err
		}
		lims = append(lims, lim)
		routes = append(routes, mw(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {})))
	}
	return lims, routes, nil
}

func (w *world) stop() {
	for _, c := range w.clients {
		c.Close()
	}
	for _, ps := range w.links {
		for _, p := range ps {
			if p != nil {
				p.close()
			}
		}
	}
	for _, s := range w.servers {
		s.Stop()
	}
}

// linkBytes is what every proxy carried so far.
func (w *world) linkBytes() int64 {
	var n int64
	for _, ps := range w.links {
		for _, p := range ps {
			if p != nil {
				n += p.bytes.Load()
			}
		}
	}
	return n
}

// setCut cuts region r off from the others, or heals it.
func (w *world) setCut(r int, cut bool) {
	for j := range names {
		if j != r {
			w.links[r][j].setCut(cut)
			w.links[j][r].setCut(cut)
		}
	}
}

func ask(h http.Handler, user string) (bool, time.Duration) {
	r := httptest.NewRequest("GET", "/api", nil)
	r.Header.Set("X-User", user)
	rec := httptest.NewRecorder()
	start := time.Now()
	h.ServeHTTP(rec, r)
	return rec.Code == http.StatusOK, time.Since(start)
}

func run(c config) error {
	w, err := startWorld(c)
	if err != nil {
		return err
	}
	defer w.stop()
	rulesText := fmt.Sprintf("user:%d/%dms; fail:closed", c.limit, c.window.Milliseconds())
	lims, routes, err := w.limiters("regions:", rulesText, true)
	if err != nil {
		return err
	}
	defer func() {
		for _, l := range lims {
			l.Close()
		}
	}()
	fmt.Printf("3 regions, %v each way, user limited to %d per %v, %.0f requests/s in all, %v per run\n\n",
		c.delay, c.limit, c.window, c.rate, c.duration)
	fmt.Println("| traffic | admitted | most in any window, by Redis's stamps | share of the limit used | replication bytes per admission |")
	fmt.Println("|---|---|---|---|---|")
	for i, tc := range []struct {
		name   string
		shares []float64
		cut    bool
	}{
		{"even", []float64{1. / 3, 1. / 3, 1. / 3}, false},
		{"90/5/5", []float64{.05, .9, .05}, false},
		{fmt.Sprintf("even, %s cut off for %v", names[1], c.cut), []float64{1. / 3, 1. / 3, 1. / 3}, true},
	} {
		traffic(c, w, routes, "user"+strconv.Itoa(i), tc.name, tc.shares, tc.cut)
	}
	if c.cpuProfile != "" {
		f, err := os.Create(c.cpuProfile)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}
	return latency(c, w)
}

// traffic sends the user's requests to the regions by shares, at c.rate,
// for c.duration, cutting region 1 off after a window for c.cut when cut,
// and prints a row.
func traffic(c config, w *world, routes []http.Handler, user, name string, shares []float64, cut bool) {
	start, bytes0 := time.Now(), w.linkBytes()
	stamps := map[string]int64{}
	stop := make(chan struct{})
	polled := make(chan struct{})
	go func() { defer close(polled); w.poll(user, stamps, stop) }()
	var mu sync.Mutex
	var at []time.Duration
	var wg sync.WaitGroup
	for r, share := range shares {
		wg.Go(func() {
			every := time.Duration(float64(time.Second) / (c.rate * share))
			for next := time.Duration(0); next < c.duration; next += every {
				time.Sleep(time.Until(start.Add(next)))
				if ok, _ := ask(routes[r], user); ok {
					mu.Lock()
					at = append(at, time.Since(start))
					mu.Unlock()
				}
			}
		})
	}
	if cut {
		time.Sleep(time.Until(start.Add(c.window)))
		w.setCut(1, true)
		time.Sleep(c.cut)
		w.setCut(1, false)
	}
	wg.Wait()
	time.Sleep(time.Second) // replication of the last admissions
	close(stop)
	<-polled
	var redisAt []time.Duration
	for _, us := range stamps {
		redisAt = append(redisAt, time.Duration(us)*time.Microsecond)
	}
	windows := int((c.duration + c.window - 1) / c.window)
	bytes := float64(w.linkBytes()-bytes0) / float64(max(len(at), 1))
	fmt.Printf("| %s | %d (%d in Redis) | %d (%d by the clients' clock) | %.1f%% | %.0f |\n", name, len(at), len(stamps),
		mostIn(redisAt, c.window), mostIn(at, c.window), 100*float64(len(at))/float64(c.limit*windows), bytes)
}

// mostIn is the most of ts in any window of w.
func mostIn(ts []time.Duration, w time.Duration) int {
	slices.Sort(ts)
	most, from := 0, 0
	for i := range ts {
		for ts[i]-ts[from] >= w {
			from++
		}
		most = max(most, i+1-from)
	}
	return most
}

// poll reads the user's entries (member → Redis stamp, µs) from every
// region's Redis every 500 ms until stop, and once more: an entry stays
// in a count key for its window, so none is missed.
func (w *world) poll(user string, stamps map[string]int64, stop <-chan struct{}) {
	ctx := context.Background()
	read := func() {
		for _, s := range w.servers {
			c := redis.NewClient(&redis.Options{Addr: s.Addr})
			keys, _ := c.Keys(ctx, "regions:*"+user+"}").Result()
			for _, k := range keys {
				zs, _ := c.ZRangeWithScores(ctx, k, 0, -1).Result()
				for _, z := range zs {
					if m, ok := z.Member.(string); ok && z.Score > 0 {
						stamps[m] = int64(z.Score)
					}
				}
			}
			c.Close()
		}
	}
	for {
		select {
		case <-stop:
			read()
			return
		case <-time.After(500 * time.Millisecond):
			read()
		}
	}
}

// latency measures the decision time and throughput of region eu's route
// with regions and without, in alternating slices of a second: first each
// request for a new user (no limit is reached: the writing path), then
// every request for one user limited to -limit per -window (nearly all
// denied once the window is full: the path a hot subject takes).
func latency(c config, w *world) error {
	var seq atomic.Int64
	fresh := func() string { return "u" + strconv.FormatInt(seq.Add(1), 10) }
	if err := latencyOf(c, w, "lat", "user:1000/min", fresh, "each request for a new user"); err != nil {
		return err
	}
	one := func() string { return "hot" }
	rules := fmt.Sprintf("user:%d/%dms", c.limit, c.window.Milliseconds())
	return latencyOf(c, w, "hot", rules, one, "every request for one user, "+rules)
}

// latencyOf is one table of latency: the route of rules, in limiters of
// key prefix name, asked for user().
func latencyOf(c config, w *world, name, rules string, user func() string, title string) error {
	var routes [2]http.Handler
	for i, regions := range []bool{false, true} {
		lims, rs, err := w.limiters(fmt.Sprintf("%s%d:", name, i), rules, regions)
		if err != nil {
			return err
		}
		defer func() {
			for _, l := range lims {
				l.Close()
			}
		}()
		routes[i] = rs[1]
	}
	var times [2][]time.Duration
	var count, allowed [2]int
	var spent [2]cpuSpent
	bytes0 := w.linkBytes() // only the limiters with regions use the links
	for slice := 0; time.Duration(slice)*time.Second < c.latency; slice++ {
		mode := slice % 2
		cpu0 := w.cpuNow(context.Background())
		end := time.Now().Add(time.Second)
		var mu sync.Mutex
		var wg sync.WaitGroup
		for range c.workers {
			wg.Go(func() {
				// The profile (-cpuprofile) tells the modes apart by label.
				pprof.SetGoroutineLabels(pprof.WithLabels(context.Background(), pprof.Labels("run", name, "regions", []string{"off", "on"}[mode])))
				var local []time.Duration
				ok := 0
				for time.Now().Before(end) {
					a, d := ask(routes[mode], user())
					local = append(local, d)
					if a {
						ok++
					}
				}
				mu.Lock()
				times[mode] = append(times[mode], local...)
				count[mode] += len(local)
				allowed[mode] += ok
				mu.Unlock()
			})
		}
		wg.Wait()
		// The replicator's batches of this slice's last admissions are
		// sent within its batch period, mostly in the next slice.
		spent[mode].add(cpu0, w.cpuNow(context.Background()), 1)
	}
	time.Sleep(time.Second) // replication of the last admissions
	linkBytes := w.linkBytes() - bytes0
	fmt.Printf("\ndecision time of one region's route, %s, %d workers, %v in alternating 1 s slices:\n\n",
		title, c.workers, c.latency)
	fmt.Println("| limiter | p50 | p99 | decisions/s | admitted | CPU µs per decision: this process, its Redis, peers' Redis, total |")
	fmt.Println("|---|---|---|---|---|---|")
	secs := c.latency.Seconds() / 2
	for i, name := range []string{"without regions", "with regions"} {
		t := times[i]
		slices.Sort(t)
		if len(t) == 0 {
			continue
		}
		per := func(d time.Duration) float64 { return float64(d.Microseconds()) / float64(count[i]) }
		s := spent[i]
		fmt.Printf("| %s | %v | %v | %.0f | %d | %.1f, %.1f, %.1f, %.1f |\n", name, t[len(t)/2].Round(time.Microsecond),
			t[len(t)*99/100].Round(time.Microsecond), float64(count[i])/secs, allowed[i],
			per(s.self), per(s.local), per(s.peers), per(s.self+s.local+s.peers))
	}
	fmt.Printf("\nreplication at that rate, batched: %.0f bytes per admission on the links, both ways\n",
		float64(linkBytes)/float64(max(allowed[1], 1)))
	return nil
}
