package engine

import (
	"context"
	"errors"
	"log/slog"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/slidelimit/slidelimit/engine/internal/health"
	"github.com/slidelimit/slidelimit/internal/redistest"
	"github.com/slidelimit/slidelimit/rules"
)

// logRecord is one line of a recordHandler.
type logRecord struct {
	level slog.Level
	msg   string
	attrs map[string]slog.Value
}

// recordHandler is a slog.Handler that keeps every record, for tests that
// count lines. It is safe for concurrent use.
type recordHandler struct {
	mu   sync.Mutex
	recs []logRecord
}

func (h *recordHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h *recordHandler) WithAttrs([]slog.Attr) slog.Handler       { return h }
func (h *recordHandler) WithGroup(string) slog.Handler            { return h }

func (h *recordHandler) Handle(_ context.Context, r slog.Record) error {
	rec := logRecord{level: r.Level, msg: r.Message, attrs: map[string]slog.Value{}}
	r.Attrs(func(a slog.Attr) bool { rec.attrs[a.Key] = a.Value; return true })
	h.mu.Lock()
	h.recs = append(h.recs, rec)
	h.mu.Unlock()
	return nil
}

// matching returns the records whose message contains s.
func (h *recordHandler) matching(s string) []logRecord {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []logRecord
	for _, r := range h.recs {
		if strings.Contains(r.msg, s) {
			out = append(out, r)
		}
	}
	return out
}

func (h *recordHandler) all() []logRecord {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.recs)
}

// quantile returns the q-quantile of ds (sorted in place).
func quantile(ds []time.Duration, q float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	slices.Sort(ds)
	return ds[min(len(ds)-1, int(q*float64(len(ds))))]
}

// TestOutageDecidesAtOnce stops redis-server and checks that, once a call
// found it down, sequential decisions go to the fail mode without waiting
// for the (long) timeout, that the engine logs the outage in a few lines,
// and that decisions come from Redis again within about a probe interval
// of a restart on the same port. It is not parallel: it counts goroutines.
func TestOutageDecidesAtOnce(t *testing.T) {
	const timeout = 2 * time.Second
	s := redistest.Start(t)
	// The client options docs/engine.md recommends: without DialerRetries 1
	// and MaxRetries -1, go-redis retries a refused dial for about 1.7 s
	// (bounded by the timeout), in the first call and in each probe.
	rc := redis.NewClient(&redis.Options{Addr: s.Addr, ContextTimeoutEnabled: true, DialerRetries: 1, MaxRetries: -1})
	t.Cleanup(func() { rc.Close() })
	rc.Ping(context.Background()) // let the client start what it starts
	before := runtime.NumGoroutine()
	h := &recordHandler{}
	e, err := New(rc, WithKeyPrefix(redistest.Prefix(t)), WithTimeout(timeout), WithFailMode(rules.FailLocal), WithLogger(slog.New(h)))
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	e.doms.One.SetLogEvery(500 * ms) // the production 10 s would outlast the test
	r := req(user("u", win(100_000, time.Minute)))
	mustAllow(t, e, r, true)

	s.Kill()
	start := time.Now()
	d, err := e.Allow(context.Background(), r)
	first := time.Since(start)
	if d.Source != "local" || !errors.Is(err, ErrBackend) {
		t.Fatalf("first call after the kill: source %v err %v", d.Source, err)
	}
	if first > timeout+500*ms {
		t.Errorf("first call after the kill took %v, timeout %v", first, timeout)
	}

	// Sequential calls: none may wait for anything like the timeout.
	var durs []time.Duration
	waited := 0
	outage := time.Now()
	for time.Since(outage) < 1500*ms {
		start := time.Now()
		d, err := e.Allow(context.Background(), r)
		el := time.Since(start)
		durs = append(durs, el)
		if el > timeout/2 {
			waited++
		}
		if d.Source != "local" || !errors.Is(err, errNotAsked) {
			t.Fatalf("call while down: source %v err %v, want local and errNotAsked", d.Source, err)
		}
	}
	n := len(durs)
	t.Logf("first call after the kill %v; then %d sequential calls: p50 %v p99 %v max %v",
		first, n, quantile(durs, 0.5), quantile(durs, 0.99), quantile(durs, 1))
	if waited > 0 {
		t.Errorf("%d of %d calls while down waited more than %v", waited, n, timeout/2)
	}

	// The outage's lines: one when it went down, then at most one per
	// 500 ms (here), with the fail-mode decisions since the last line:
	// probes at 0, 50, 150, 350, 750, 1550 ms find it down: 2 or 3 lines.
	warns := h.matching("does not answer")
	if len(warns) < 2 || len(warns) > 4 {
		t.Errorf("%d outage warnings in 1.5 s with one per 500 ms, want 2 to 4: %+v", len(warns), warns)
	}
	for _, w := range warns {
		t.Logf("%s server=%s fail_mode_decisions=%d err=%v", w.msg, w.attrs["server"], w.attrs["fail_mode_decisions"].Int64(), w.attrs["err"])
	}
	counted := int64(0)
	for i, w := range warns {
		if w.level != slog.LevelWarn || w.attrs["server"].String() != s.Addr {
			t.Errorf("warning %d: %+v", i, w)
		}
		counted += w.attrs["fail_mode_decisions"].Int64()
	}
	if counted == 0 || counted > int64(n+1) {
		t.Errorf("warnings count %d fail-mode decisions, made %d", counted, n+1)
	}

	s.Restart()
	restarted := time.Now()
	for {
		start := time.Now()
		d, err := e.Allow(context.Background(), r)
		if el := time.Since(start); el > timeout/2 {
			t.Errorf("call after the restart took %v", el)
		}
		if err == nil && d.Source == "redis" {
			break
		}
		if time.Since(restarted) > 5*time.Second {
			t.Fatalf("no decision from Redis 5 s after the restart: %v %v", d.Source, err)
		}
		time.Sleep(ms)
	}
	back := time.Since(restarted)
	t.Logf("back on Redis %v after the restart answered PING", back)
	if back > 2*health.ProbeMaxEvery {
		t.Errorf("back on Redis %v after the restart, want within about one probe interval (%v)", back, health.ProbeMaxEvery)
	}
	if ups := h.matching("answers again"); len(ups) != 1 || ups[0].level != slog.LevelInfo {
		t.Errorf("recovery lines: %+v, want one", ups)
	}
	if all := h.all(); len(all) > len(warns)+2 {
		t.Errorf("%d log lines in all: %+v", len(all), all)
	}

	e.Close()
	for range 200 {
		if runtime.NumGoroutine() <= before {
			return
		}
		time.Sleep(10 * ms)
	}
	buf := make([]byte, 1<<16)
	t.Fatalf("%d goroutines after Close, %d before:\n%s", runtime.NumGoroutine(), before, buf[:runtime.Stack(buf, true)])
}

// TestCloseStopsProbe checks that Close stops the probe of a server that
// is still down, and the eviction guard: no goroutine is left. It is not
// parallel: it counts goroutines.
func TestCloseStopsProbe(t *testing.T) {
	s := redistest.Start(t)
	rc := redis.NewClient(&redis.Options{Addr: s.Addr, ContextTimeoutEnabled: true, DialerRetries: 1, MaxRetries: -1})
	t.Cleanup(func() { rc.Close() })
	rc.Ping(context.Background())
	before := runtime.NumGoroutine()
	e, err := New(rc, WithKeyPrefix(redistest.Prefix(t)), withEvictionCheck(10*ms))
	if err != nil {
		t.Fatal(err)
	}
	s.Kill()
	if d, err := e.Allow(context.Background(), req(user("u", win(10, time.Minute)))); d.Source != "local" || err == nil {
		t.Fatalf("after the kill: %v %v", d.Source, err)
	}
	if !e.doms.One.Down.Load() || !e.doms.One.Probing.Load() {
		t.Fatal("no probe running for the stopped server")
	}
	time.Sleep(50 * ms) // a few guard checks and probes fail meanwhile
	e.Close()
	if e.doms.One.Probing.Load() {
		t.Error("probe still running after Close")
	}
	for range 200 {
		if runtime.NumGoroutine() <= before {
			return
		}
		time.Sleep(10 * ms)
	}
	buf := make([]byte, 1<<16)
	t.Fatalf("%d goroutines after Close, %d before:\n%s", runtime.NumGoroutine(), before, buf[:runtime.Stack(buf, true)])
}
