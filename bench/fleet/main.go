// Command fleet measures a Throttle shared by a fleet of real processes:
// it starts its own redis-server on a free loopback port and a fake
// upstream that counts arrivals in an exact sliding window and answers 429
// when over it, then runs -procs copies of itself as child processes, each
// with -workers goroutines calling the upstream in a loop through one
// Throttle (Wait, the request, Finish), optionally pausing between calls
// (-pause) or giving up waits (-leave).
//
// It reports:
//
//   - utilization: the calls the upstream accepted over the run, as a share
//     of what its limit allows (limit × ⌈run / period⌉), and as a share of
//     what the throttle's own limit allows (its windows kept the transit
//     bound longer);
//
//   - the upstream's 429s;
//
//   - the longest idle gap: the longest time during which the throttle's
//     window had room (after an admission, or once the oldest admission of
//     a full window left it) and some worker waited, with no admission,
//     from the admissions' Redis times and the workers' waits.
//
//     cd bench && go run ./fleet -procs 3 -workers 24 -limit 60 -period 1s -duration 20s
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/slidelimit/slidelimit"
)

type config struct {
	procs, workers, limit int
	period, duration      time.Duration
	margin                float64
	tokens                int64
	leave                 float64
	pause                 time.Duration
	redisBin              string
	runs                  int
	transit               time.Duration // WithTransitBound: each call counted that much longer
}

func main() {
	var c config
	flag.IntVar(&c.procs, "procs", 3, "processes sharing the throttle")
	flag.IntVar(&c.workers, "workers", 24, "workers per process")
	flag.IntVar(&c.limit, "limit", 60, "the upstream's limit: calls per -period")
	flag.DurationVar(&c.period, "period", time.Second, "the upstream's window")
	flag.Float64Var(&c.margin, "margin", 0, "declare the throttle's window as -period × (1 + margin); the transit bound keeps the upstream's limits at 0")
	flag.DurationVar(&c.duration, "duration", 20*time.Second, "how long the workers call")
	flag.Int64Var(&c.tokens, "tokens", 0, "the upstream's token limit per -period (0: none); a call is estimated 150 tokens, "+
		"costs 50..150 known only to the upstream, and is settled to it")
	flag.Float64Var(&c.leave, "leave", 0, "the share of Waits given a deadline of 0..300 ms, which leave the queue when it ends")
	flag.DurationVar(&c.pause, "pause", 0, "after each call a worker pauses 0..pause (random): the lane empties and fills again")
	flag.StringVar(&c.redisBin, "redis-server", "redis-server", "the redis-server binary")
	flag.IntVar(&c.runs, "runs", 1, "runs, each on a fresh key prefix")
	flag.DurationVar(&c.transit, "transit", 50*time.Millisecond, "the processes' transit bound (WithTransitBound)")
	child := flag.Bool("child", false, "internal: run as one process of the fleet")
	flag.Parse()
	if *child {
		if err := runChild(); err != nil {
			fmt.Fprintln(os.Stderr, "child:", err)
			os.Exit(1)
		}
		return
	}
	if err := run(c); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

func (c config) rules() string {
	ms := time.Duration(float64(c.period) * (1 + c.margin)).Milliseconds()
	r := fmt.Sprintf("key(apikey):%d/%dms", c.limit, ms)
	if c.tokens > 0 {
		r += fmt.Sprintf("; key(apikey)[tokens]:%d/%dms", c.tokens, ms)
	}
	return r
}

// upstream enforces limit calls per period, exactly, on arrivals.
type upstream struct {
	limit  int
	tokens int64 // 0: no token limit
	period time.Duration

	mu       sync.Mutex
	log      []time.Time // accepted arrivals, oldest first, within period
	cost     []int64     // the tokens of each in log
	n        int64
	used     int64       // tokens accepted
	accepted []time.Time // every accepted arrival
	admitted []time.Time // the throttle's admission time (Redis) of each
	refused  int
	waits    []span // when the workers waited (their Wait calls), from the children
}

// span is a time interval [from, to).
type span struct{ from, to time.Time }

func (u *upstream) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path == "/warm" {
		return
	}
	if r.URL.Path == "/waits" {
		// A child's waits: lines of "from to", µs.
		body, _ := io.ReadAll(r.Body)
		u.mu.Lock()
		defer u.mu.Unlock()
		for line := range strings.Lines(string(body)) {
			var from, to int64
			if _, err := fmt.Sscan(line, &from, &to); err == nil {
				u.waits = append(u.waits, span{time.UnixMicro(from), time.UnixMicro(to)})
			}
		}
		return
	}
	now := time.Now()
	u.mu.Lock()
	defer u.mu.Unlock()
	i := 0
	for i < len(u.log) && now.Sub(u.log[i]) >= u.period {
		i++
	}
	u.log, u.cost = u.log[i:], u.cost[i:]
	var inWindow int64
	for _, c := range u.cost {
		inWindow += c
	}
	u.n++
	tokens := 50 + u.n*37%101 // 50..150, known only here
	if len(u.log) >= u.limit || u.tokens > 0 && inWindow+tokens > u.tokens {
		u.refused++
		w.Header().Set("Retry-After", "1")
		w.WriteHeader(http.StatusTooManyRequests)
		return
	}
	u.log, u.cost = append(u.log, now), append(u.cost, tokens)
	u.used += tokens
	w.Header().Set("X-Usage-Tokens", strconv.FormatInt(tokens, 10))
	u.accepted = append(u.accepted, now)
	if us, err := strconv.ParseInt(r.Header.Get("X-Admitted"), 10, 64); err == nil {
		u.admitted = append(u.admitted, time.UnixMicro(us))
	}
	io.WriteString(w, "ok")
}

func run(c config) error {
	srv, err := startRedis(c.redisBin)
	if err != nil {
		return err
	}
	defer srv.stop()
	fmt.Printf("fleet: %d processes × %d workers, upstream %d/%v, throttle %q, %v per run, redis %s\n",
		c.procs, c.workers, c.limit, c.period, c.rules(), c.duration, srv.addr)
	for i := range c.runs {
		if err := runOnce(c, srv.addr, fmt.Sprintf("fleet%d:%d:", os.Getpid(), i)); err != nil {
			return err
		}
	}
	return nil
}

func runOnce(c config, addr, prefix string) error {
	up := &upstream{limit: c.limit, tokens: c.tokens, period: c.period}
	hs := httptest.NewServer(up)
	defer hs.Close()
	start := time.Now().Add(2 * time.Second) // the children start together
	end := start.Add(c.duration)
	var cmds []*exec.Cmd
	for range c.procs {
		cmd := exec.Command(os.Args[0], "-child")
		cmd.Env = append(os.Environ(),
			"FLEET_REDIS="+addr, "FLEET_URL="+hs.URL, "FLEET_PREFIX="+prefix, "FLEET_RULES="+c.rules(),
			"FLEET_WORKERS="+strconv.Itoa(c.workers), "FLEET_LEAVE="+strconv.FormatFloat(c.leave, 'g', -1, 64),
			"FLEET_PAUSE="+c.pause.String(), "FLEET_TRANSIT="+c.transit.String(),
			"FLEET_START="+strconv.FormatInt(start.UnixMicro(), 10), "FLEET_END="+strconv.FormatInt(end.UnixMicro(), 10))
		cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		if err := cmd.Start(); err != nil {
			return err
		}
		cmds = append(cmds, cmd)
	}
	for _, cmd := range cmds {
		if err := cmd.Wait(); err != nil {
			return fmt.Errorf("a child failed: %w", err)
		}
	}
	up.mu.Lock()
	defer up.mu.Unlock()
	if len(up.accepted) == 0 {
		return fmt.Errorf("the upstream accepted nothing")
	}
	// A sliding window of limit calls per period admits at most limit ×
	// ⌈run/period⌉ calls over the run [start, end): all at once at start,
	// start+period, ...
	span := c.duration
	throttlePeriod := time.Duration(float64(c.period)*(1+c.margin)) + c.transit
	allowed := float64(c.limit) * float64((span+c.period-1)/c.period)
	allowedThrottle := float64(c.limit) * float64((span+throttlePeriod-1)/throttlePeriod)
	util, utilThrottle := float64(len(up.accepted))/allowed, float64(len(up.accepted))/allowedThrottle
	what, gaps := "calls", ""
	if c.tokens > 0 {
		// The token limit binds (calls cost 100 on average), and when its
		// window has room is not known here: no idle gap.
		what, gaps = "tokens", "idle gap not measured (a token window)"
		util = float64(up.used) / (float64(c.tokens) * float64((span+c.period-1)/c.period))
		utilThrottle = float64(up.used) / (float64(c.tokens) * float64((span+throttlePeriod-1)/throttlePeriod))
	} else {
		gap, at, over := idleGap(up.admitted, up.waits, c.limit, throttlePeriod, 100*time.Millisecond)
		gaps = fmt.Sprintf("longest idle gap with room %v (at +%v), gaps ≥ 100ms: %d",
			gap.Round(time.Millisecond), at.Sub(start).Round(time.Millisecond), over)
	}
	fmt.Printf("accepted %d calls in %v: %s utilization %.1f%% of the upstream's limit, %.1f%% of the throttle's; 429s %d; %s\n",
		len(up.accepted), span.Round(time.Millisecond), what, 100*util, 100*utilThrottle, up.refused, gaps)
	return nil
}

// idleGap returns, for admissions at times adm (any order) under a window
// of limit calls per period, the longest time during which the window had
// room and some worker waited, with no admission; when it began; and the
// number of such times of at least long. After admission k (in time
// order) the window has room once admission k-limit+1 has left it; a
// worker waits from its call of Wait to its admission or the end of its
// context.
func idleGap(adm []time.Time, waits []span, limit int, period, long time.Duration) (time.Duration, time.Time, int) {
	a := slices.Clone(adm)
	slices.SortFunc(a, func(x, y time.Time) int { return x.Compare(y) })
	w := slices.Clone(waits)
	slices.SortFunc(w, func(x, y span) int { return x.from.Compare(y.from) })
	var worst time.Duration
	var at time.Time
	n := 0
	for k := 0; k+1 < len(a); k++ {
		room := a[k]
		if j := k - limit + 1; j >= 0 && a[j].Add(period).After(room) {
			room = a[j].Add(period)
		}
		next := a[k+1]
		if !next.After(room) {
			continue
		}
		// The longest part of [room, next) when some worker waited.
		var cur span
		var longest time.Duration
		for _, s := range w {
			if !s.from.Before(next) {
				break
			}
			from, to := s.from, s.to
			if from.Before(room) {
				from = room
			}
			if to.After(next) {
				to = next
			}
			if !from.Before(to) {
				continue
			}
			if cur.to.IsZero() || from.After(cur.to) {
				cur = span{from, to}
			} else if to.After(cur.to) {
				cur.to = to
			}
			if d := cur.to.Sub(cur.from); d > longest {
				longest = d
				if d > worst {
					worst, at = d, cur.from
				}
			}
		}
		if longest >= long {
			n++
		}
	}
	return worst, at, n
}

func env(name string) string { return os.Getenv("FLEET_" + name) }

func runChild() error {
	workers, _ := strconv.Atoi(env("WORKERS"))
	startUS, _ := strconv.ParseInt(env("START"), 10, 64)
	endUS, _ := strconv.ParseInt(env("END"), 10, 64)
	rdb := redis.NewClient(&redis.Options{Addr: env("REDIS"), ContextTimeoutEnabled: true})
	defer rdb.Close()
	transit, err := time.ParseDuration(env("TRANSIT"))
	if err != nil {
		return fmt.Errorf("FLEET_TRANSIT: %w", err)
	}
	lim, err := slidelimit.New(rdb, slidelimit.WithKeyPrefix(env("PREFIX")), slidelimit.WithTransitBound(transit))
	if err != nil {
		return err
	}
	defer lim.Close()
	th, err := lim.Throttle("fleet", env("RULES"))
	if err != nil {
		return err
	}
	base := &http.Transport{MaxIdleConnsPerHost: workers, DialContext: (&net.Dialer{}).DialContext}
	defer base.CloseIdleConnections()
	hc := &http.Client{Transport: base}
	url := env("URL")
	var warm sync.WaitGroup
	for range workers {
		warm.Go(func() {
			if resp, err := hc.Get(url + "/warm"); err == nil {
				resp.Body.Close()
			}
		})
	}
	warm.Wait()
	time.Sleep(time.Until(time.UnixMicro(startUS)))
	ctx, cancel := context.WithDeadline(context.Background(), time.UnixMicro(endUS))
	defer cancel()
	leave, _ := strconv.ParseFloat(env("LEAVE"), 64)
	pause, _ := time.ParseDuration(env("PAUSE"))
	var mu sync.Mutex
	var waits strings.Builder
	call := slidelimit.Call{Keys: map[string]string{"apikey": "k1"}, Costs: map[string]int64{"tokens": 150}}
	if !strings.Contains(env("RULES"), "[tokens]") {
		call.Costs = nil
	}
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for range workers {
		wg.Go(func() {
			for ctx.Err() == nil {
				wctx, wcancel := ctx, context.CancelFunc(func() {})
				if rand.Float64() < leave {
					wctx, wcancel = context.WithTimeout(ctx, time.Duration(rand.Int64N(int64(300*time.Millisecond))))
				}
				arrived := time.Now()
				p, err := th.Wait(wctx, call)
				end := time.Now()
				if d, ok := wctx.Deadline(); ok && d.Before(end) {
					end = d // not a waiter once its context ended
				}
				if err == nil {
					end = p.Decision().Time
				}
				mu.Lock()
				fmt.Fprintf(&waits, "%d %d\n", arrived.UnixMicro(), end.UnixMicro())
				mu.Unlock()
				wcancel()
				if err != nil {
					if ctx.Err() != nil {
						return
					}
					if wctx.Err() == nil {
						errs <- err
						return
					}
					continue
				}
				req, _ := http.NewRequest(http.MethodGet, url, nil)
				req.Header.Set("X-Admitted", strconv.FormatInt(p.Decision().Time.UnixMicro(), 10))
				resp, err := hc.Do(req)
				var actual map[string]int64
				if err == nil {
					io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					if n, err := strconv.ParseInt(resp.Header.Get("X-Usage-Tokens"), 10, 64); err == nil && call.Costs != nil {
						actual = map[string]int64{"tokens": n}
					}
				}
				p.Finish(actual)
				if pause > 0 {
					select {
					case <-ctx.Done():
					case <-time.After(time.Duration(rand.Int64N(int64(pause)))):
					}
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	if resp, err := http.Post(url+"/waits", "text/plain", strings.NewReader(waits.String())); err == nil {
		resp.Body.Close()
	}
	var msgs []string
	for err := range errs {
		msgs = append(msgs, err.Error())
	}
	if len(msgs) > 0 {
		return fmt.Errorf("%d waits failed: %s", len(msgs), strings.Join(msgs[:1], ""))
	}
	return nil
}
