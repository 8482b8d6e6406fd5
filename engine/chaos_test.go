package engine

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/slidelimit/slidelimit/internal/redistest"
	"github.com/slidelimit/slidelimit/rules"
)

// chaosDuration is how long TestChaosSoak runs its load; its schedule of
// faults repeats every 10 s.
const chaosDuration = 30 * time.Second

// chaosRec is one decision of TestChaosSoak.
type chaosRec struct {
	at   time.Duration // start, since the load began
	dur  time.Duration
	down bool // decided without the network: the server was known down
	src  source
}

// TestChaosSoak runs two engines (one client each, as two processes) under
// concurrent load on 60 subjects while faults hit the server in turn:
// SCRIPT FLUSH with FUNCTION FLUSH, CLIENT KILL TYPE normal, DEBUG SLEEP 0.3, memory full
// (CONFIG SET maxmemory) and a crash and restart with AOF on the same port.
// It asserts that no stored window ever held more than its limit, that
// every decision comes from where the fail mode allows, that no decision
// waited much longer than the timeout, and that the engines leave no
// goroutine and no heap behind after Close. It is not parallel: it counts
// goroutines.
func TestChaosSoak(t *testing.T) {
	const (
		timeout  = 250 * time.Millisecond
		subjects = 60
		callers  = 8 // per engine
	)
	s := redistest.StartWith(t, "--appendonly", "yes", "--appendfsync", "everysec", "--enable-debug-command", "local")
	admin := redis.NewClient(&redis.Options{Addr: s.Addr, MaxRetries: -1, DialerRetries: 1})
	defer admin.Close()
	ctx := context.Background()
	prefix := redistest.Prefix(t)

	runtime.GC()
	var mem runtime.MemStats
	runtime.ReadMemStats(&mem)
	heapBefore := mem.HeapAlloc
	goBefore := runtime.NumGoroutine()

	h := &recordHandler{}
	var clients []*redis.Client
	var engines []*Engine
	for node := range int64(2) {
		rc := redis.NewClient(&redis.Options{Addr: s.Addr, ContextTimeoutEnabled: true, MaxRetries: -1, DialerRetries: 1})
		clients = append(clients, rc)
		e, err := New(rc, WithKeyPrefix(prefix), WithNode(node+1), WithTimeout(timeout), WithFailMode(rules.FailLocal),
			WithLogger(slog.New(h)))
		if err != nil {
			t.Fatal(err)
		}
		engines = append(engines, e)
	}
	ws := []rules.Window{win(10, 100*ms), win(40, time.Second)}
	reqs := make([]Request, subjects)
	keys := make([]string, subjects)
	for i := range reqs {
		reqs[i] = req(user("s"+strconv.Itoa(i), ws...))
		keys[i] = engines[0].keyOf("s", reqs[i].Checks[0])
		// A group with an hour-long window shares the key, so that nothing
		// is trimmed and every admission can be audited afterwards.
		mustAllow(t, engines[0], req(user("s"+strconv.Itoa(i), win(1_000_000, time.Hour))), true)
	}

	// The faults, one every 2 s, the schedule repeating every 10 s.
	type faultRec struct {
		name string
		at   time.Duration
	}
	var faults []faultRec
	began := time.Now()
	stop := make(chan struct{})
	var fwg sync.WaitGroup
	fwg.Add(1)
	go func() {
		defer fwg.Done()
		fault := func(name string, f func() error) {
			at := time.Since(began)
			if err := f(); err != nil {
				t.Errorf("fault %s: %v", name, err)
			}
			faults = append(faults, faultRec{name, at})
		}
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			case <-time.After(2 * time.Second):
			}
			switch i % 5 {
			case 0:
				// Both: decisions go as FCALL, and as EVALSHA while the
				// function is missing.
				fault("SCRIPT FLUSH and FUNCTION FLUSH", func() error {
					if err := admin.ScriptFlush(ctx).Err(); err != nil {
						return err
					}
					return admin.FunctionFlush(ctx).Err()
				})
			case 1:
				fault("CLIENT KILL TYPE normal", func() error { return admin.Do(ctx, "client", "kill", "type", "normal").Err() })
			case 2:
				fault("DEBUG SLEEP 0.3", func() error { return admin.Do(ctx, "debug", "sleep", "0.3").Err() })
			case 3:
				fault("maxmemory 1 for 0.5 s", func() error {
					if err := admin.ConfigSet(ctx, "maxmemory", "1").Err(); err != nil {
						return err
					}
					time.Sleep(500 * ms)
					return admin.ConfigSet(ctx, "maxmemory", "0").Err()
				})
			case 4:
				fault("crash and restart with AOF", func() error {
					s.Kill()
					time.Sleep(200 * ms)
					s.Restart()
					return nil
				})
			}
		}
	}()

	// One slice per caller: a shared one's lock and growth would stall
	// the callers more than the faults do.
	recsOf := make([][]chaosRec, 2*callers)
	var bySource [fromCache + 1]atomic.Int64
	hammerLoop(t, engines, callers, chaosDuration, func(e *Engine, g, i int) error {
		slot := g
		if e == engines[1] {
			slot += callers
		}
		r := reqs[(i*7+g)%subjects]
		start := time.Now()
		d, err := e.Allow(ctx, r)
		dur := time.Since(start)
		bySource[sourceNamed(d.Source)].Add(1)
		ok := false
		switch sourceNamed(d.Source) {
		case fromRedis:
			ok = err == nil
		case fromCache:
			ok = err == nil && !d.Allowed
		case fromLocal:
			ok = errors.Is(err, ErrBackend)
		}
		if !ok {
			return fmt.Errorf("decision from %v (allowed %v) with error %v: not what FailLocal allows", d.Source, d.Allowed, err)
		}
		recsOf[slot] = append(recsOf[slot], chaosRec{at: start.Sub(began), dur: dur, down: errors.Is(err, errNotAsked), src: sourceNamed(d.Source)})
		return nil
	})
	recs := slices.Concat(recsOf...)
	recsOf = nil
	close(stop)
	fwg.Wait()
	t.Logf("faults: %v", faults)
	t.Logf("decisions: %d redis, %d cache, %d local", bySource[fromRedis].Load(), bySource[fromCache].Load(), bySource[fromLocal].Load())
	if len(faults) < 10 {
		t.Errorf("only %d faults ran", len(faults))
	}

	// Latency: no decision waits much longer than one timeout (a call
	// queued behind a batch in flight waits for it first), and once the
	// server is known down, decisions wait for no timeout at all.
	var all, down []time.Duration
	over, downOver := 0, 0
	for _, r := range recs {
		all = append(all, r.dur)
		if r.down {
			down = append(down, r.dur)
			if r.dur > timeout {
				downOver++
			}
		}
		if r.dur > timeout+50*ms {
			over++
		}
	}
	// The slowest decisions, with the fault before them, for diagnosis.
	slices.SortFunc(recs, func(a, b chaosRec) int { return int(b.dur - a.dur) })
	for _, r := range recs[:min(5, len(recs))] {
		last := faultRec{name: "no fault"}
		for _, f := range faults {
			if f.at <= r.at {
				last = f
			}
		}
		t.Logf("slow decision: %v from %v (known down %v), started %v after %s", r.dur, r.src, r.down, r.at-last.at, last.name)
	}
	t.Logf("all %d decisions: p50 %v p99 %v max %v; %d took longer than the timeout + 50 ms",
		len(all), quantile(all, 0.5), quantile(all, 0.99), quantile(all, 1), over)
	t.Logf("%d decisions while known down: p50 %v p99 %v max %v",
		len(down), quantile(down, 0.5), quantile(down, 0.99), quantile(down, 1))
	// Counts, not a maximum: under -race on a loaded machine a caller can
	// be descheduled for hundreds of milliseconds anywhere. A decision
	// waits beyond the timeout only when it queued behind a batch that
	// timed out (DEBUG SLEEP); every decision of an outage waiting for the
	// timeout would be thousands.
	if limit := len(all) / 200; over > limit {
		t.Errorf("%d of %d decisions took longer than the timeout + 50 ms, want at most %d", over, len(all), limit)
	}
	// Known down is also what a call queued behind a batch that timed out
	// is told (it waited for that batch, counted above), so this too is a
	// count: a known-down decision that waited for the network itself
	// would take a whole timeout, and there would be thousands.
	if len(down) == 0 {
		t.Error("no decision was made while the server was known down")
	} else if limit := len(down) / 200; downOver > limit {
		t.Errorf("%d of %d decisions while known down took longer than the timeout, want at most %d", downOver, len(down), limit)
	}

	// Exactness: no stored window ever held more than its limit.
	for i, key := range keys {
		ts := entries(t, admin, key)
		if len(ts) == 0 {
			t.Errorf("subject %d: no stored entry", i)
			continue
		}
		checkWindowsQuiet(t, "s"+strconv.Itoa(i), ts[1:], ws) // ts[0] is the keeper
	}
	checkTTLs(t, admin, prefix)
	lines := h.all()
	t.Logf("%d log lines in %v", len(lines), chaosDuration)
	for _, l := range lines {
		t.Logf("  %s %s", l.level, l.msg)
	}

	// Nothing left behind.
	for _, e := range engines {
		e.Close()
	}
	for _, c := range clients {
		c.Close()
	}
	engines, clients, recs, all, down = nil, nil, nil, nil, nil
	deadline := time.Now().Add(5 * time.Second)
	for runtime.NumGoroutine() > goBefore && time.Now().Before(deadline) {
		time.Sleep(10 * ms)
	}
	if n := runtime.NumGoroutine(); n > goBefore {
		buf := make([]byte, 1<<16)
		t.Errorf("%d goroutines after Close, %d before:\n%s", n, goBefore, buf[:runtime.Stack(buf, true)])
	}
	runtime.GC()
	runtime.GC()
	runtime.ReadMemStats(&mem)
	t.Logf("heap %d KB before, %d KB after Close", heapBefore>>10, mem.HeapAlloc>>10)
	if mem.HeapAlloc > heapBefore+16<<20 {
		t.Errorf("heap %d KB after Close, %d KB before", mem.HeapAlloc>>10, heapBefore>>10)
	}
}

// checkWindowsQuiet is checkWindows without its log lines.
func checkWindowsQuiet(t *testing.T, name string, ts []int64, ws []rules.Window) {
	t.Helper()
	slices.Sort(ts)
	for _, w := range ws {
		per := w.Period.Microseconds()
		lo := 0
		for i, at := range ts {
			for ts[lo] <= at-per {
				lo++
			}
			if int64(i-lo+1) > w.Limit {
				t.Errorf("%s: %d entries in (%d-%v, %d], limit %d", name, i-lo+1, at, w.Period, at, w.Limit)
				break
			}
		}
	}
}
