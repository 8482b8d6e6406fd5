package replay

import (
	"context"
	"fmt"
	"io"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/slidelimit/slidelimit/engine"
	"github.com/slidelimit/slidelimit/rules"
)

// genLog is an io.Reader of n Combined Log Format lines, 20 a second
// from a pool of ips client addresses (a fifth of them logged in), with
// every 50th line up to 3 s out of order; with oneSecond, every line is of
// the same second. It makes long logs without holding them in memory.
type genLog struct {
	n, i, ips int
	oneSecond bool
	buf       []byte
}

func (g *genLog) Read(p []byte) (int, error) {
	for len(g.buf) < len(p) && g.i < g.n {
		i := g.i
		g.i++
		at := t0.Add(time.Duration(i) * 50 * time.Millisecond)
		if i%50 == 0 {
			at = at.Add(-3 * time.Second)
		}
		if g.oneSecond {
			at = t0
		}
		ip := (i * 7919) % g.ips
		user := "-"
		if ip%5 == 0 {
			user = fmt.Sprintf("u%d", ip)
		}
		g.buf = fmt.Appendf(g.buf, "10.%d.%d.%d - %s [%s] \"GET /files/%d HTTP/1.1\" %d %d \"-\" \"bench\"\n",
			ip>>16&255, ip>>8&255, ip&255, user, at.Format("02/Jan/2006:15:04:05 -0700"), i%100, 200+i%3*100, 100+i%4000)
	}
	if len(g.buf) == 0 {
		return 0, io.EOF
	}
	n := copy(p, g.buf)
	g.buf = g.buf[:copy(g.buf, g.buf[n:])]
	return n, nil
}

// BenchmarkReplay1M replays 1,000,000 log lines (about 14 hours at 20
// requests a second from 300 clients) through two routes of rules with
// several windows, a cost, a block and count:, in process: the issue's
// target is 30 s on two cores. Run it with -benchtime 1x.
func BenchmarkReplay1M(b *testing.B) {
	rr := []RouteRules{
		{Pattern: "GET /files/{id}", Text: "ip:5/s,20/min,100/h; user:1000/h; user[bytes]:2000000/10min; block:1m; count:2xx,3xx", Origin: "bench"},
		{Pattern: "/", Text: "ip:10/s", Origin: "bench"},
	}
	b.ReportAllocs()
	for b.Loop() {
		start := time.Now()
		// The live heap, sampled every 100,000 lines: it stays flat
		// while the log goes on.
		var peak, first uint64
		n := 0
		sample := func(Record, bool) {
			if n++; n%100_000 != 0 {
				return
			}
			var m runtime.MemStats
			runtime.ReadMemStats(&m)
			peak = max(peak, m.HeapInuse)
			if first == 0 {
				first = m.HeapInuse
			}
		}
		rep, err := Run(context.Background(), Config{Routes: rr, Inputs: []Input{{Name: "gen", R: &genLog{n: 1_000_000, ips: 300}}}, Decider: InProcess, OnDecision: sample})
		if err != nil {
			b.Fatal(err)
		}
		if rep.Requests != 1_000_000 || rep.Bad != 0 {
			b.Fatalf("requests %d bad %d", rep.Requests, rep.Bad)
		}
		b.ReportMetric(float64(rep.Requests)/time.Since(start).Seconds(), "lines/s")
		b.ReportMetric(float64(rep.Denied), "denied")
		b.ReportMetric(float64(first)/(1<<20), "heap-MB@100k")
		b.ReportMetric(float64(peak)/(1<<20), "peak-heap-MB")
	}
}

// BenchmarkReplayOneSecond replays 4,000,000 lines of one second (the
// rules of BenchmarkReplay1M): memory must stay bounded by the live
// windows, not grow with the lines that share a time. Run it with
// -benchtime 1x.
func BenchmarkReplayOneSecond(b *testing.B) {
	rr := []RouteRules{
		{Pattern: "GET /files/{id}", Text: "ip:5/s,20/min,100/h; user:1000/h; user[bytes]:2000000/10min; block:1m; count:2xx,3xx", Origin: "bench"},
		{Pattern: "/", Text: "ip:10/s", Origin: "bench"},
	}
	const lines = 4_000_000
	for b.Loop() {
		runtime.GC()
		start := time.Now()
		var peak uint64
		n := 0
		sample := func(Record, bool) {
			if n++; n%100_000 != 0 {
				return
			}
			var m runtime.MemStats
			runtime.ReadMemStats(&m)
			peak = max(peak, m.HeapInuse)
		}
		rep, err := Run(context.Background(), Config{Routes: rr, Inputs: []Input{{Name: "gen", R: &genLog{n: lines, ips: 300, oneSecond: true}}}, Decider: InProcess, OnDecision: sample})
		if err != nil {
			b.Fatal(err)
		}
		el := time.Since(start)
		if rep.Requests != lines || rep.Bad != 0 || rep.Late != 0 {
			b.Fatalf("requests %d bad %d late %d", rep.Requests, rep.Bad, rep.Late)
		}
		runtime.GC()
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		b.ReportMetric(float64(rep.Requests)/el.Seconds(), "lines/s")
		b.ReportMetric(float64(peak)/(1<<20), "peak-heap-MB")
		b.ReportMetric(float64(m.HeapInuse)/(1<<20), "heap-after-MB")
		runtime.KeepAlive(rep)
	}
}

// TestMemoryBound replays a long log whose clients come and go and
// requires the in-process state to stay within the live windows: keys of
// subjects whose windows have emptied are swept, and each key holds only
// its longest window's entries.
func TestMemoryBound(t *testing.T) {
	t.Parallel()
	l := newLocal()
	w := []rules.Window{{Limit: 50, Period: time.Minute}, {Limit: 5, Period: time.Second}}
	var v verdict
	maxKeys, maxEntries := 0, 0
	const n = 400_000
	for i := range n {
		at := t0.Add(time.Duration(i) * 10 * time.Millisecond).UnixMicro() // 100/s
		// A new client every 100 requests: 4,000 subjects over 67 minutes.
		req := engine.Request{Checks: []engine.Check{{Rule: rules.Rule{Kind: rules.IP, Windows: w}, Subject: fmt.Sprintf("ip:%d", i/100)}}}
		if err := l.decide("s", &req, true, at, &v); err != nil {
			t.Fatal(err)
		}
		if i%10_000 == 0 {
			k, e := l.size()
			maxKeys, maxEntries = max(maxKeys, k), max(maxEntries, e)
		}
	}
	// Live: the subjects of the last minute (6,000 requests, 60 clients)
	// plus those not yet swept (sweepEvery requests, 656 clients).
	if maxKeys > 60+sweepEvery/100+2 || maxEntries > (60+sweepEvery/100+2)*50 {
		t.Errorf("held up to %d keys and %d entries for %d subjects: not bounded by the live windows", maxKeys, maxEntries, n/100)
	}
	t.Logf("held at most %d keys, %d entries over %d subjects", maxKeys, maxEntries, n/100)

	// The reorder buffer holds one horizon of lines, not the log.
	src, err := open(Input{Name: "gen", R: &genLog{n: 200_000, ips: 1000}}, 0, new(atomic.Int64))
	if err != nil {
		t.Fatal(err)
	}
	src.fields, src.bad, src.lines = &DefaultFields, &badLines{}, new(int64)
	s := &sorted{src: src, horizon: (10 * time.Second).Microseconds(), late: &badLines{}, held: new(int64), budget: MaxReorder}
	most := 0
	for {
		r, err := s.peek()
		if err != nil {
			t.Fatal(err)
		}
		if r == nil {
			break
		}
		most = max(most, len(s.h))
		s.pop()
	}
	if most > 20*13+1 { // 20 lines a second, 10 s horizon plus 3 s of disorder
		t.Errorf("reorder buffer held %d lines", most)
	}
	if s.late.n != 0 {
		t.Errorf("%d late lines", s.late.n)
	}
	runtime.KeepAlive(s)
}

// BenchmarkReplayScriptEmbedded replays 20,000 lines through the engine's
// script on the embedded miniredis (Decider Script): the exact-by-
// construction path, for comparison with the in-process one.
func BenchmarkReplayScriptEmbedded(b *testing.B) {
	rr := []RouteRules{{Pattern: "GET /files/{id}", Text: "ip:5/s,20/min,100/h; user:1000/h; block:1m; count:2xx,3xx", Origin: "bench"}}
	for b.Loop() {
		start := time.Now()
		rep, err := Run(context.Background(), Config{Routes: rr, Inputs: []Input{{Name: "gen", R: &genLog{n: 20_000, ips: 300}}}, Decider: Script})
		if err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(float64(rep.Requests)/time.Since(start).Seconds(), "lines/s")
	}
}

// TestReorderBounded: lines that share a time do not accumulate in the
// reorder buffer: it holds at most its budget (plus one line), hands every
// line out in file order, and a line that comes behind one that left
// because the buffer was full is late, with a message that says so.
func TestReorderBounded(t *testing.T) {
	const n, budget = 50_000, 1 << 20
	src, err := open(Input{Name: "gen", R: io.MultiReader(&genLog{n: n, ips: 1000, oneSecond: true},
		strings.NewReader(`10.0.0.1 - - [25/Nov/2026:09:59:59 +0000] "GET / HTTP/1.1" 200 1 "-" "early"`+"\n"))}, 0, new(atomic.Int64))
	if err != nil {
		t.Fatal(err)
	}
	src.fields, src.bad, src.lines = &DefaultFields, &badLines{}, new(int64)
	held := new(int64)
	s := &sorted{src: src, horizon: DefaultReorder.Microseconds(), late: &badLines{}, held: held, budget: budget}
	most, out, line := 0, 0, 0
	for {
		r, err := s.peek()
		if err != nil {
			t.Fatal(err)
		}
		if r == nil {
			break
		}
		most = max(most, len(s.h))
		if *held > budget+MaxLine+recordOverhead {
			t.Fatalf("the buffer holds %d bytes, over its budget of %d", *held, budget)
		}
		rec := s.pop()
		if rec.Line <= line {
			t.Fatalf("line %d handed out after line %d", rec.Line, line)
		}
		line = rec.Line
		out++
	}
	if most > budget/recordOverhead+1 {
		t.Errorf("the buffer held %d lines of one second (budget %d bytes)", most, budget)
	}
	if out != n || s.late.n != 1 || len(s.late.first) != 1 || !strings.Contains(s.late.first[0], "reorder buffers hold") {
		t.Errorf("%d lines out, late %d %q; want %d and the last line late for the full buffer", out, s.late.n, s.late.first, n)
	}
	if *held != 0 {
		t.Errorf("the buffer counts %d bytes held at the end", *held)
	}
}
