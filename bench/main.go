// Command bench compares slidelimit with other Redis rate limiters for Go
// on this machine.
//
// It starts its own redis-server on a free loopback port (no persistence, a
// temporary directory), runs every selected case against it with FLUSHALL
// between cases, prints a markdown table of the results to standard output
// and stops the server, also on Ctrl-C or a panic. Progress goes to
// standard error. See README.md for the flags and the meaning of each
// column.
package main

import (
	"bufio"
	"cmp"
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"regexp"
	"runtime"
	"runtime/debug"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
)

// benchCase is one workload.
type benchCase struct {
	// Name identifies the case in the table and for -cases.
	Name string
	// Keys is the number of distinct subjects the callers cycle through.
	Keys int
	// Deny makes the limit tiny: the first decision (made before the
	// warm-up) fills it and every measured decision is a denial.
	Deny bool
}

func cases(keys int) []benchCase {
	return []benchCase{
		{Name: "allow-hot", Keys: 1},
		{Name: fmt.Sprintf("allow-%dkeys", keys), Keys: keys},
		{Name: "deny-hot", Keys: 1, Deny: true},
	}
}

// allLibraries returns every library under test, slidelimit first.
func allLibraries() []library {
	return append(append([]library(nil), slidelimitLibraries...), peerLibraries...)
}

// runLibraries returns the libraries a run measures: every library, and
// the floor script (see floorScript) when floor is set.
func runLibraries(floor bool) []library {
	libs := allLibraries()
	if floor {
		libs = append(libs, floorLibraries...)
	}
	return libs
}

type options struct {
	duration    time.Duration
	warmup      time.Duration
	callers     []int
	keys        int
	rounds      int
	waitQuiet   time.Duration
	filter      *regexp.Regexp
	redisServer string
	poolSize    int
	floor       bool
}

// result is the measurement of one library on one case with one number of
// callers.
type result struct {
	Lib, Case string
	Callers   int
	Config    string

	Decisions, Allowed, Errors uint64
	FirstErr                   error
	Elapsed                    time.Duration
	P50, P99                   time.Duration
	AllocsPerDecision          float64
	// CPU time during the measured phase: of this process (the library
	// and the harness), of redis-server, and of every other process on
	// the machine.
	SelfCPU, RedisCPU, OtherCPU time.Duration
	CPUOK                       bool
	// Wakeups is this process's voluntary context switches during the
	// measured phase (see cpuSample.nvcsw).
	Wakeups               int64
	RedisKeys, RedisBytes int64
	// Subjects is the number of distinct keys the callers used.
	Subjects int
	// MinRate and MaxRate are the lowest and highest decisions/s over
	// the rounds (set by medians when there were several).
	MinRate, MaxRate float64
	// Rounds is the number of rounds the row summarises.
	Rounds int
	// Round is the round this run belongs to (1 for the first).
	Round int
	// Commands holds the Redis commands run during the measured phase,
	// including those run by scripts and the harness's own INFO calls.
	Commands []cmdStat
}

var (
	cleanupMu  sync.Mutex
	cleanupFns []func()
)

// atCleanup registers f to run at exit, on Ctrl-C and on a panic in any
// goroutine of the benchmark.
func atCleanup(f func()) {
	cleanupMu.Lock()
	defer cleanupMu.Unlock()
	cleanupFns = append(cleanupFns, f)
}

func cleanup() {
	cleanupMu.Lock()
	fns := cleanupFns
	cleanupFns = nil
	cleanupMu.Unlock()
	for i := len(fns) - 1; i >= 0; i-- {
		fns[i]()
	}
}

// crashGuard runs the cleanup functions before a panic ends the process. It
// must be deferred at the top of every goroutine the benchmark starts.
func crashGuard() {
	if r := recover(); r != nil {
		cleanup()
		panic(r)
	}
}

func fatalf(format string, args ...any) {
	cleanup()
	fmt.Fprintf(os.Stderr, "bench: "+format+"\n", args...)
	os.Exit(1)
}

func main() {
	defer crashGuard()
	var (
		o        options
		callers  = flag.String("callers", "1,8,64", "comma-separated numbers of concurrent caller goroutines")
		casesExp = flag.String("cases", "", "run only the runs whose \"library:case\" matches this regular expression (e.g. 'slidelimit.*:allow-hot', ':deny')")
		cpuProf  = flag.String("cpuprofile", "", "write a CPU profile of this process (not of redis-server) to this file")
	)
	flag.DurationVar(&o.duration, "duration", 3*time.Second, "measured time per run (one library, case and number of callers)")
	flag.DurationVar(&o.warmup, "warmup", time.Second, "unmeasured warm-up before each run")
	flag.IntVar(&o.rounds, "rounds", 1, "repeat the whole set of runs this many times and report, per row, the run with the median decisions/s (with the range)")
	flag.DurationVar(&o.waitQuiet, "wait-quiet", 0, "before each run, wait up to this long until other processes take less than 0.2 cores (0: do not wait)")
	flag.IntVar(&o.keys, "keys", 10_000, "number of distinct keys of the many-keys case")
	flag.StringVar(&o.redisServer, "redis-server", "redis-server", "redis-server binary to start")
	latency := flag.Bool("latency", false, "run the latency probe instead (see latency.go): the HTTP middleware's p50 with Redis behind a delaying proxy")
	latencyDelay := flag.Duration("latency-delay", time.Millisecond, "the latency probe's delay in each direction")
	latencyN := flag.Int("latency-n", 500, "the latency probe's requests per route")
	interleave := flag.String("interleave", "", "instead of the table, run these libraries (comma-separated names) with one caller alternating between them (see interleave.go)")
	pairsFlag := flag.String("pairs", "", "after the table, print per-round ratios of decisions/s for these pairs of libraries (\"A,B;C,D\": A's ÷ B's, C's ÷ D's; see pairs.go)")
	flag.BoolVar(&o.floor, "floor", false, "also run the floor script: the Redis work an exact 2-window log cannot skip, not a limiter (see floor.go)")
	flag.Parse()

	for _, f := range strings.Split(*callers, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			fatalf("bad -callers %q", *callers)
		}
		o.callers = append(o.callers, n)
		o.poolSize = max(o.poolSize, n)
	}
	o.poolSize = max(o.poolSize, 10)
	if o.rounds < 1 {
		fatalf("-rounds must be at least 1")
	}
	if o.keys < 1 {
		fatalf("-keys must be at least 1")
	}
	pairs, err := parsePairs(*pairsFlag)
	if err != nil {
		fatalf("%v", err)
	}
	if o.filter, err = regexp.Compile(*casesExp); err != nil {
		fatalf("bad -cases: %v", err)
	}

	if *cpuProf != "" {
		f, err := os.Create(*cpuProf)
		if err != nil {
			fatalf("%v", err)
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			fatalf("%v", err)
		}
		atCleanup(func() { pprof.StopCPUProfile(); f.Close() })
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	srv, err := startRedis(o.redisServer)
	if err != nil {
		fatalf("%v", err)
	}
	atCleanup(srv.Stop)
	defer cleanup()
	fmt.Fprintf(os.Stderr, "bench: redis-server %s on %s\n", srv.Version, srv.Addr)
	if *latency {
		if err := latencyProbe(srv.Addr, *latencyDelay, *latencyN); err != nil {
			fatalf("latency probe: %v", err)
		}
		return
	}

	if *interleave != "" {
		if err := interleaveProbe(ctx, srv.Addr, o, strings.Split(*interleave, ",")); err != nil {
			fatalf("interleave: %v", err)
		}
		return
	}

	var results []result
rounds:
	for round := 1; round <= o.rounds; round++ {
		for _, c := range cases(o.keys) {
			for _, n := range o.callers {
				for _, lib := range runLibraries(o.floor) {
					if !o.filter.MatchString(lib.Name + ":" + c.Name) {
						continue
					}
					if ctx.Err() != nil {
						break rounds
					}
					fmt.Fprintf(os.Stderr, "bench: round %d/%d: %s %s callers=%d ... ", round, o.rounds, lib.Name, c.Name, n)
					r, err := runOne(ctx, srv.Addr, o, lib, c, n)
					if ctx.Err() != nil {
						fmt.Fprintln(os.Stderr, "interrupted")
						break rounds
					}
					if err != nil {
						fmt.Fprintf(os.Stderr, "error: %v\n", err)
						r = result{Lib: lib.Name, Case: c.Name, Callers: n, FirstErr: err}
					} else {
						fmt.Fprintf(os.Stderr, "%.0f decisions/s\n", r.rate())
					}
					r.Round = round
					results = append(results, r)
				}
			}
		}
	}
	if ctx.Err() != nil {
		fmt.Fprintln(os.Stderr, "bench: interrupted; printing what was measured")
	}
	printReport(os.Stdout, srv.Version, o, medians(results))
	printPairs(os.Stdout, results, pairs)
}

// newClient returns the go-redis client every library gets: the same
// options for all, with a pool large enough for every caller to hold a
// connection.
func newClient(addr string, poolSize int) *redis.Client {
	return redis.NewClient(&redis.Options{
		Addr:     addr,
		PoolSize: poolSize,
	})
}

// worker is the state of one caller goroutine.
type worker struct {
	decide                     decideFunc
	next                       int // index of the next key
	decisions, allowed, errors uint64
	firstErr                   error
	lat                        hist
}

func runOne(ctx context.Context, addr string, o options, lib library, c benchCase, callers int) (result, error) {
	r := result{Lib: lib.Name, Case: c.Name, Callers: callers}
	rdb := newClient(addr, o.poolSize)
	defer rdb.Close()
	if err := rdb.FlushAll(ctx).Err(); err != nil {
		return r, fmt.Errorf("FLUSHALL: %w", err)
	}
	if o.waitQuiet > 0 {
		if load := waitQuiet(ctx, rdb, o.waitQuiet); load >= 0.2 {
			fmt.Fprintf(os.Stderr, "(not quiet: other processes at %.2f cores) ", load)
		}
	}
	setup, err := lib.Setup(ctx, rdb, c)
	if err != nil {
		return r, fmt.Errorf("setup: %w", err)
	}
	defer setup.Close()
	r.Config = setup.Config

	keys := make([]string, c.Keys)
	for i := range keys {
		keys[i] = fmt.Sprintf("user-%06d", i)
	}
	touched := make([]atomic.Bool, c.Keys)
	workers := make([]*worker, callers)
	for i := range workers {
		// Callers start at different keys and then go round-robin.
		workers[i] = &worker{decide: setup.NewCaller(), next: i * 7919 % c.Keys}
	}

	if c.Deny {
		// Fill the tiny limit, and check that it now denies.
		for i, want := range []bool{true, false} {
			ok, err := workers[0].decide(ctx, keys[0])
			if err != nil {
				return r, fmt.Errorf("pre-fill: %w", err)
			}
			if ok != want {
				return r, fmt.Errorf("pre-fill: decision %d allowed=%v, want %v", i+1, ok, want)
			}
		}
	}

	if o.warmup > 0 {
		if err := phase(ctx, workers, keys, touched, o.warmup); err != nil {
			return r, err
		}
		for _, w := range workers {
			w.decisions, w.allowed, w.errors, w.firstErr = 0, 0, 0, nil
			w.lat = hist{}
		}
	}

	// CONFIG RESETSTAT zeroes INFO commandstats (on our own server).
	if err := rdb.ConfigResetStat(ctx).Err(); err != nil {
		return r, fmt.Errorf("CONFIG RESETSTAT: %w", err)
	}
	runtime.GC()
	var m0, m1 runtime.MemStats
	c0 := sampleCPU(ctx, rdb)
	runtime.ReadMemStats(&m0)
	start := time.Now()
	err = phase(ctx, workers, keys, touched, o.duration)
	r.Elapsed = time.Since(start)
	runtime.ReadMemStats(&m1)
	c1 := sampleCPU(ctx, rdb)
	if err != nil {
		return r, err
	}
	if r.Commands, err = commandStats(ctx, rdb); err != nil {
		return r, fmt.Errorf("INFO commandstats: %w", err)
	}
	if c0.ok && c1.ok {
		r.CPUOK = true
		r.SelfCPU = c1.self - c0.self
		r.RedisCPU = c1.redis - c0.redis
		r.OtherCPU = max(0, c1.machine-c0.machine-r.SelfCPU-r.RedisCPU)
		r.Wakeups = c1.nvcsw - c0.nvcsw
	}

	var all hist
	for _, w := range workers {
		r.Decisions += w.decisions
		r.Allowed += w.allowed
		r.Errors += w.errors
		if r.FirstErr == nil {
			r.FirstErr = w.firstErr
		}
		all.merge(&w.lat)
	}
	r.P50, r.P99 = all.quantile(0.50), all.quantile(0.99)
	if r.Decisions > 0 {
		r.AllocsPerDecision = float64(m1.Mallocs-m0.Mallocs) / float64(r.Decisions)
	}
	for i := range touched {
		if touched[i].Load() {
			r.Subjects++
		}
	}
	if r.RedisKeys, r.RedisBytes, err = keyMemory(ctx, rdb); err != nil {
		return r, fmt.Errorf("memory usage: %w", err)
	}
	return r, nil
}

// phase runs every worker for d (or until ctx is done) and waits for them.
func phase(ctx context.Context, workers []*worker, keys []string, touched []atomic.Bool, d time.Duration) error {
	var stop atomic.Bool
	var wg sync.WaitGroup
	for _, w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer crashGuard()
			for !stop.Load() {
				key := keys[w.next]
				if !touched[w.next].Load() {
					touched[w.next].Store(true)
				}
				if w.next++; w.next == len(keys) {
					w.next = 0
				}
				t0 := time.Now()
				ok, err := w.decide(ctx, key)
				w.lat.record(time.Since(t0))
				w.decisions++
				switch {
				case err != nil:
					w.errors++
					if w.firstErr == nil {
						w.firstErr = err
					}
				case ok:
					w.allowed++
				}
			}
		}()
	}
	select {
	case <-time.After(d):
	case <-ctx.Done():
	}
	stop.Store(true)
	wg.Wait()
	return ctx.Err()
}

// medians returns one result per library, case and number of callers, in
// the order of their first run: the one with the median decisions/s, with
// the range over all rounds. Failed runs count as 0 decisions/s.
func medians(results []result) []result {
	type rowKey struct {
		lib, cas string
		callers  int
	}
	var order []rowKey
	rows := map[rowKey][]result{}
	for _, r := range results {
		k := rowKey{r.Lib, r.Case, r.Callers}
		if _, ok := rows[k]; !ok {
			order = append(order, k)
		}
		rows[k] = append(rows[k], r)
	}
	out := make([]result, 0, len(order))
	for _, k := range order {
		rs := rows[k]
		slices.SortFunc(rs, func(a, b result) int { return cmp.Compare(a.rate(), b.rate()) })
		m := rs[(len(rs)-1)/2]
		m.MinRate, m.MaxRate, m.Rounds = rs[0].rate(), rs[len(rs)-1].rate(), len(rs)
		out = append(out, m)
	}
	return out
}

// cpuPerDecision returns the CPU time of client and Redis together per
// decision, or 0 when the run has no CPU samples.
func (r result) cpuPerDecision() time.Duration {
	if !r.CPUOK || r.Decisions == 0 {
		return 0
	}
	return (r.SelfCPU + r.RedisCPU) / time.Duration(r.Decisions)
}

func (r result) rate() float64 {
	if r.Elapsed <= 0 {
		return 0
	}
	return float64(r.Decisions) / r.Elapsed.Seconds()
}

func printReport(w io.Writer, redisVersion string, o options, results []result) {
	fmt.Fprintf(w, "Machine: %s, %d cores (GOMAXPROCS %d), %s %s/%s, redis-server %s (own process on loopback, no persistence), shared by client and server.\n\n",
		cpuModel(), runtime.NumCPU(), runtime.GOMAXPROCS(0), runtime.Version(), runtime.GOOS, runtime.GOARCH, redisVersion)
	fmt.Fprintf(w, "Modules: %s.\n\n", moduleVersions())
	if v := engineRevision(); v != "" {
		fmt.Fprintf(w, "slidelimit engine: %s.\n\n", v)
	}
	fmt.Fprintf(w, "Each run: %v warm-up, then %v measured; FLUSHALL before each run; one go-redis client per run (PoolSize %d).",
		o.warmup, o.duration, o.poolSize)
	if o.waitQuiet > 0 {
		fmt.Fprintf(w, " Before each run, waited up to %v for other processes to take less than 0.2 cores.", o.waitQuiet)
	}
	if o.rounds > 1 {
		fmt.Fprintf(w, " %d rounds of every run, interleaved; each row is the round with the median decisions/s, the range in parentheses.", o.rounds)
	}
	fmt.Fprint(w, "\n\n")

	fmt.Fprintln(w, "| library | case | callers | decisions/s | allowed | p50 | p99 | allocs/decision | Redis CPU µs/decision | Go CPU µs/decision | CPU µs/decision (Redis + Go) | client wake-ups/decision | Redis B/subject | Redis keys | other procs' CPU (cores) |")
	fmt.Fprintln(w, "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
	var notes []string
	for _, r := range results {
		if r.Decisions == 0 {
			fmt.Fprintf(w, "| %s | %s | %d | error | | | | | | | | | | | |\n", r.Lib, r.Case, r.Callers)
			notes = append(notes, fmt.Sprintf("%s %s callers=%d: %v", r.Lib, r.Case, r.Callers, r.FirstErr))
			continue
		}
		redisCPU, goCPU, total, wakeups, other := "?", "?", "?", "?", "?"
		if r.CPUOK {
			per := func(d time.Duration) string {
				return fmt.Sprintf("%.1f", float64(d)/float64(time.Microsecond)/float64(r.Decisions))
			}
			redisCPU, goCPU, total = per(r.RedisCPU), per(r.SelfCPU), per(r.RedisCPU+r.SelfCPU)
			wakeups = fmt.Sprintf("%.2f", float64(r.Wakeups)/float64(r.Decisions))
			other = fmt.Sprintf("%.2f", r.OtherCPU.Seconds()/r.Elapsed.Seconds())
		}
		rate := fmtRate(r.rate())
		if r.Rounds > 1 {
			rate += " (" + fmtRate(r.MinRate) + "–" + fmtRate(r.MaxRate) + ")"
		}
		fmt.Fprintf(w, "| %s | %s | %d | %s | %s | %s | %s | %.1f | %s | %s | %s | %s | %s | %d | %s |\n",
			r.Lib, r.Case, r.Callers, rate,
			fmtPct(r.Allowed, r.Decisions), fmtDur(r.P50), fmtDur(r.P99), r.AllocsPerDecision,
			redisCPU, goCPU, total, wakeups,
			fmtBytes(float64(r.RedisBytes)/float64(max(r.Subjects, 1))), r.RedisKeys, other)
		if r.Errors > 0 {
			notes = append(notes, fmt.Sprintf("%s %s callers=%d: %d errors of %d decisions, first: %v",
				r.Lib, r.Case, r.Callers, r.Errors, r.Decisions, r.FirstErr))
		}
	}
	printRatios(w, results)
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Limits used:")
	fmt.Fprintln(w)
	seen := map[string]bool{}
	for _, r := range results {
		k := r.Lib + " " + r.Case + ": " + r.Config
		if r.Config == "" || seen[k] {
			continue
		}
		seen[k] = true
		fmt.Fprintf(w, "- %s\n", k)
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Redis commands per decision (INFO commandstats over the measured phase; commands run by scripts count too, and a script's own entry includes their time): calls, µs.")
	fmt.Fprintln(w)
	for _, r := range results {
		if r.Decisions == 0 {
			continue
		}
		var parts []string
		var total float64
		for _, c := range r.Commands {
			if c.Name == "info" || c.Name == "config|resetstat" {
				continue
			}
			calls := float64(c.Calls) / float64(r.Decisions)
			if !scriptCommand(c.Name) {
				total += calls
			}
			parts = append(parts, fmt.Sprintf("%s %.2f, %.1f µs", c.Name, calls, float64(c.Usec)/float64(r.Decisions)))
		}
		fmt.Fprintf(w, "- %s %s callers=%d (%.2f data commands): %s\n", r.Lib, r.Case, r.Callers, total, strings.Join(parts, "; "))
	}
	if len(notes) > 0 {
		fmt.Fprintln(w)
		fmt.Fprintln(w, "Errors:")
		fmt.Fprintln(w)
		for _, n := range notes {
			fmt.Fprintf(w, "- %s\n", n)
		}
	}
}

// Peers slidelimit's rows are compared with, by library name: each peer
// doing one window (like-for-like with slidelimit's 1-window group) and
// doing the 2-window job its own way (samejob.go).
var ratioPeers = []string{redisRate, ulule, redisRate2W, ulule2W, plain1W, plain2W}

// printRatios prints, for every slidelimit row (and floor row, with
// -floor), its decisions/s divided by each peer's in the same case, number
// of callers and run.
func printRatios(w io.Writer, results []result) {
	type rowKey struct {
		cas     string
		callers int
	}
	peers := map[rowKey]map[string]float64{}
	for _, r := range results {
		for _, p := range ratioPeers {
			if r.Lib == p && r.rate() > 0 {
				k := rowKey{r.Case, r.Callers}
				if peers[k] == nil {
					peers[k] = map[string]float64{}
				}
				peers[k][p] = r.rate()
			}
		}
	}
	header := false
	for _, r := range results {
		ps := peers[rowKey{r.Case, r.Callers}]
		compared := strings.HasPrefix(r.Lib, "slidelimit") || strings.HasPrefix(r.Lib, "floor")
		if !compared || len(ps) == 0 {
			continue
		}
		if !header {
			fmt.Fprintln(w)
			fmt.Fprintln(w, "slidelimit's (and the floor's) decisions/s divided by each peer's (same case, callers and run):")
			fmt.Fprintln(w)
			fmt.Fprintln(w, "| library | case | callers | ÷ "+strings.Join(ratioPeers, " | ÷ ")+" |")
			fmt.Fprintln(w, "|---|---|---:"+strings.Repeat("|---:", len(ratioPeers))+"|")
			header = true
		}
		fmt.Fprintf(w, "| %s | %s | %d |", r.Lib, r.Case, r.Callers)
		for _, p := range ratioPeers {
			if v, ok := ps[p]; ok {
				fmt.Fprintf(w, " %.2f× |", r.rate()/v)
			} else {
				fmt.Fprint(w, " — |")
			}
		}
		fmt.Fprintln(w)
	}
}

// scriptCommand reports whether name runs a script rather than touching
// data itself.
func scriptCommand(name string) bool {
	switch name {
	case "eval", "evalsha", "eval_ro", "evalsha_ro", "fcall", "fcall_ro", "multi", "exec", "script|load":
		return true
	}
	return false
}

func fmtRate(r float64) string {
	if r >= 1000 {
		return fmt.Sprintf("%.1fk", r/1000)
	}
	return fmt.Sprintf("%.0f", r)
}

func fmtPct(n, of uint64) string {
	switch n {
	case 0:
		return "0%"
	case of:
		return "100%"
	}
	return fmt.Sprintf("%.2f%%", 100*float64(n)/float64(of))
}

func fmtDur(d time.Duration) string {
	if d < time.Millisecond {
		return fmt.Sprintf("%.0f µs", float64(d)/float64(time.Microsecond))
	}
	return fmt.Sprintf("%.2f ms", float64(d)/float64(time.Millisecond))
}

func fmtBytes(b float64) string {
	switch {
	case b >= 1<<20:
		return fmt.Sprintf("%.1f MB", b/(1<<20))
	case b >= 10<<10:
		return fmt.Sprintf("%.0f kB", b/(1<<10))
	}
	return fmt.Sprintf("%.0f", b)
}

// cpuModel returns the first "model name" of /proc/cpuinfo.
func cpuModel() string {
	f, err := os.Open("/proc/cpuinfo")
	if err != nil {
		return "unknown CPU"
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if k, v, ok := strings.Cut(sc.Text(), ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return "unknown CPU"
}

// moduleVersions lists the versions of the Redis client and of the
// libraries under test, as built into this binary.
func moduleVersions() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "unknown"
	}
	want := map[string]bool{
		"github.com/redis/go-redis/v9":       true,
		"github.com/go-redis/redis_rate/v10": true,
		"github.com/ulule/limiter/v3":        true,
		"github.com/go-chi/httprate":         true,
		"github.com/go-chi/httprate-redis":   true,
		"github.com/slidelimit/slidelimit":   true,
	}
	var out []string
	for _, d := range bi.Deps {
		if want[d.Path] {
			v := d.Version
			if d.Replace != nil {
				v = "local " + d.Replace.Path
			}
			out = append(out, d.Path+" "+v)
		}
	}
	return strings.Join(out, ", ")
}

// engineRevision describes the slidelimit source the benchmark was built
// from (the replace directive points at ../): the last commit touching
// engine/ or lua/, and whether those directories had uncommitted changes.
// It returns "" when git cannot tell.
func engineRevision() string {
	out, err := exec.Command("git", "-C", "..", "log", "-1", "--format=%h %s", "--", "engine", "lua").Output()
	if err != nil || len(out) == 0 {
		return ""
	}
	rev := "commit " + strings.TrimSpace(string(out))
	if st, err := exec.Command("git", "-C", "..", "status", "--porcelain", "--", "engine", "lua").Output(); err == nil && len(st) > 0 {
		rev += ", plus uncommitted changes in the working tree"
	}
	return rev
}
