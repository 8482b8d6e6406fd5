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
//
// Classes, tenants and keys (workload.go, report.go): -classes gives each
// class its workers per process (Call.Class), and optionally their pause
// (critical:1:2s, a class of low demand), -rules adds statements such
// as share(critical):30%; -tenants spreads the workers of every class over
// tenants (Call.Tenant), the first with -heavy times the workers of the
// others; -keys K makes every call a WaitAny over K API keys, each of
// which the upstream limits to -limit per -period on its own, and -block
// has the upstream answer one call on key k0, halfway through, 429 with
// Retry-After, which the workers teach the throttle (Permit.Learn).
// -delay and -respond add a transit and a response time; -ramp spreads
// the workers' starts. The report adds the admissions and waits per class, the admissions per
// tenant with Jain's fairness index, the arrivals per key in any period,
// and the calls other processes sent on a key the upstream blocked.
//
//	cd bench && go run ./fleet -procs 3 -limit 20 -duration 8s -rules 'share(critical):30%' -classes critical:4,batch:20
//	cd bench && go run ./fleet -procs 3 -limit 20 -duration 8s -tenants 10 -heavy 10 -workers 2
//	cd bench && go run ./fleet -procs 3 -limit 10 -duration 8s -keys 3 -workers 12 -block 2
package main

import (
	"flag"
	"fmt"
	"net/http/httptest"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"syscall"
	"time"

	"github.com/slidelimit/slidelimit/bench/internal/redisproc"
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

	extra          string // statements added to the rules (-rules)
	classes        string // -classes: class:workers,...
	tenants, heavy int
	keys           int           // WaitAny over this many keys; <= 1: Wait on one
	block          int           // seconds of the upstream's block of k0 halfway (0: none)
	delay, respond time.Duration // the most a call's transit and the upstream's answer take
	ramp           time.Duration // each worker starts 0..ramp after the run's start
	spec           []workers     // parsed from classes, tenants, heavy and workers
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
	flag.StringVar(&c.extra, "rules", "", "statements added to the throttle's rules, such as 'share(critical):30%'")
	flag.StringVar(&c.classes, "classes", "", "workers per process by class (Call.Class), such as critical:4,batch:20 or critical:1:2s,batch:20 (pausing 0..2s after each call); else -workers of no class")
	flag.IntVar(&c.tenants, "tenants", 0, "tenants (Call.Tenant): each class's workers, per tenant; 0: no tenant")
	flag.IntVar(&c.heavy, "heavy", 1, "the first tenant has this many times the workers of the others")
	flag.IntVar(&c.keys, "keys", 1, "API keys: with 2 or more every call is a WaitAny over them, each limited by the upstream on its own")
	flag.IntVar(&c.block, "block", 0, "halfway, the upstream answers a call on key k0 429 with Retry-After of this many seconds")
	flag.DurationVar(&c.delay, "delay", 0, "a call's transit: the worker sleeps 0..delay (random) between admission and sending")
	flag.DurationVar(&c.respond, "respond", 0, "the upstream answers 0..respond (random) after counting a call")
	flag.DurationVar(&c.ramp, "ramp", 0, "each worker starts 0..ramp (random) after the run's start, not all at once")
	child := flag.Bool("child", false, "internal: run as one process of the fleet")
	flag.Parse()
	if *child {
		if err := runChild(); err != nil {
			fmt.Fprintln(os.Stderr, "child:", err)
			os.Exit(1)
		}
		return
	}
	var err error
	if c.spec, err = parseSpec(c.classes, c.workers, c.tenants, c.heavy); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
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
	if c.extra != "" {
		r += "; " + c.extra
	}
	return r
}

func run(c config) error {
	srv, err := redisproc.Start(c.redisBin, "fleet")
	if err != nil {
		return err
	}
	defer srv.Stop()
	n := 0
	for _, w := range c.spec {
		n += w.n
	}
	fmt.Printf("fleet: %d processes × %d workers (%s), %d keys, upstream %d/%v per key, throttle %q, %v per run, redis %s\n",
		c.procs, n, encodeSpec(c.spec), max(c.keys, 1), c.limit, c.period, c.rules(), c.duration, srv.Addr)
	for i := range c.runs {
		if err := runOnce(c, srv.Addr, fmt.Sprintf("fleet%d:%d:", os.Getpid(), i)); err != nil {
			return err
		}
	}
	return nil
}

func runOnce(c config, addr, prefix string) error {
	up := &upstream{limit: c.limit, tokens: c.tokens, period: c.period, respond: c.respond, blockD: c.block}
	hs := httptest.NewServer(up)
	defer hs.Close()
	start := time.Now().Add(2 * time.Second) // the children start together
	end := start.Add(c.duration)
	up.mu.Lock()
	up.blockAt = start.Add(c.duration / 2)
	up.mu.Unlock()
	var cmds []*exec.Cmd
	for i := range c.procs {
		cmd := exec.Command(os.Args[0], "-child")
		cmd.Env = append(os.Environ(),
			"FLEET_REDIS="+addr, "FLEET_URL="+hs.URL, "FLEET_PREFIX="+prefix, "FLEET_RULES="+c.rules(),
			"FLEET_SPEC="+encodeSpec(c.spec), "FLEET_LEAVE="+strconv.FormatFloat(c.leave, 'g', -1, 64),
			"FLEET_PAUSE="+c.pause.String(), "FLEET_TRANSIT="+c.transit.String(), "FLEET_DELAY="+c.delay.String(),
			"FLEET_KEYS="+strconv.Itoa(c.keys), "FLEET_PROC="+strconv.Itoa(i), "FLEET_RAMP="+c.ramp.String(),
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
	report(c, up, start)
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

// span is a time interval [from, to).
type span struct{ from, to time.Time }
