package replay

import (
	"context"
	"fmt"
	"io"
	"runtime"
	"strings"
	"testing"
	"time"
)

// clfAt is a CLF line of a request by 192.0.2.1 at t.
func clfAt(t time.Time) string {
	return req{t: t, ip: "192.0.2.1", path: "/", status: 200, bytes: 10}.clf()
}

// allocated returns the bytes f allocated. Tests that call it do not run
// in parallel, so that no other test's allocations count.
func allocated(f func()) uint64 {
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	f()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

// TestLongSpan replays logs whose first and last lines are decades apart
// and one with a line in the year 9999: the report's time series has at
// most maxBuckets buckets, and the run allocates a bounded amount,
// whatever the span. It used to fill one entry per minute between the
// first line and the last: 84 s and 3.4 GB for 55 years, out of memory
// for the year 9999. Not parallel: it measures allocations.
func TestLongSpan(t *testing.T) {
	start := time.Date(1970, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, tt := range []struct {
		name       string
		log        string
		requests   int64
		bad        int64
		wantBucket time.Duration
	}{
		{"55 years", clfAt(start) + clfAt(start.Add(time.Second)) + clfAt(start.AddDate(55, 0, 0)), 3, 0, 2 * 24 * time.Hour},
		{"the year 9999", clfAt(t0) + clfAt(time.Date(9999, 12, 31, 23, 59, 59, 0, time.UTC)) + clfAt(t0.Add(2*time.Minute)), 2, 1, time.Minute},
		{"280 years", clfAt(start) + clfAt(time.Date(2249, 12, 31, 23, 59, 59, 0, time.UTC)), 2, 0, 16 * 24 * time.Hour},
	} {
		var rep *Report
		var err error
		bytes := allocated(func() {
			rep, err = runText(t, Config{Routes: []RouteRules{{Text: "ip:1/s"}}, Inputs: []Input{{Name: "x.log", R: strings.NewReader(tt.log)}}})
		})
		if err != nil {
			t.Fatalf("%s: %v", tt.name, err)
		}
		if rep.Requests != tt.requests || rep.Bad != tt.bad {
			t.Errorf("%s: %d requests, %d bad; want %d, %d", tt.name, rep.Requests, rep.Bad, tt.requests, tt.bad)
		}
		if len(rep.Minutes) > maxBuckets || rep.Bucket != tt.wantBucket {
			t.Errorf("%s: %d buckets of %v, want at most %d of %v", tt.name, len(rep.Minutes), rep.Bucket, maxBuckets, tt.wantBucket)
		}
		var sum int64
		for _, m := range rep.Minutes {
			sum += m.Admitted + m.Denied
		}
		if sum != rep.Requests || rep.Minutes[0].Admitted == 0 || rep.Minutes[len(rep.Minutes)-1].Admitted == 0 {
			t.Errorf("%s: the buckets count %d requests, first %+v, last %+v", tt.name, sum, rep.Minutes[0], rep.Minutes[len(rep.Minutes)-1])
		}
		// maxBuckets buckets are under 0.5 MB; the rest is the run's
		// fixed cost (readers, rules, decider).
		if bytes > 16<<20 {
			t.Errorf("%s: the run allocated %d MB", tt.name, bytes>>20)
		}
		t.Logf("%s: %d buckets of %v, %d KB allocated", tt.name, len(rep.Minutes), rep.Bucket, bytes>>10)
	}
}

// TestMinuteSeries checks the time series of a log of a few minutes: one
// bucket per minute, a minute without a request included, as before
// buckets could be coarser.
func TestMinuteSeries(t *testing.T) {
	t.Parallel()
	log := clfAt(t0) + clfAt(t0) + clfAt(t0.Add(2*time.Minute+time.Second))
	rep, err := runText(t, Config{Routes: []RouteRules{{Text: "ip:1/s"}}, Inputs: []Input{{Name: "-", R: strings.NewReader(log)}}})
	if err != nil {
		t.Fatal(err)
	}
	want := []Minute{{t0, 1, 1}, {t0.Add(time.Minute), 0, 0}, {t0.Add(2 * time.Minute), 1, 0}}
	if rep.Bucket != time.Minute || len(rep.Minutes) != 3 {
		t.Fatalf("buckets of %v: %+v, want %+v", rep.Bucket, rep.Minutes, want)
	}
	for i := range want {
		if !rep.Minutes[i].Start.Equal(want[i].Start) || rep.Minutes[i].Admitted != want[i].Admitted || rep.Minutes[i].Denied != want[i].Denied {
			t.Errorf("minute %d: %+v, want %+v", i, rep.Minutes[i], want[i])
		}
	}
	var b strings.Builder
	if err := rep.WriteHTML(&b); err != nil || !strings.Contains(b.String(), "requests per minute (UTC)") {
		t.Errorf("chart caption: %v", err)
	}
}

// TestTimelineBounded adds requests spread over growing spans and checks
// that the timeline never holds more than maxBuckets buckets and loses no
// request when it coarsens.
func TestTimelineBounded(t *testing.T) {
	t.Parallel()
	var tl timeline
	at := t0
	n := 0
	for at.Year() < 2240 {
		tl.add(at.UnixMicro(), n%3 != 0)
		n++
		if len(tl.counts) > maxBuckets || tl.hi-tl.lo >= maxBuckets {
			t.Fatalf("at %v: %d buckets held, indexes %d..%d", at, len(tl.counts), tl.lo, tl.hi)
		}
		at = at.Add(time.Duration(n) * 37 * time.Second)
	}
	s, width := tl.series()
	var admitted, denied int64
	for i, m := range s {
		admitted, denied = admitted+m.Admitted, denied+m.Denied
		if i > 0 && m.Start.Sub(s[i-1].Start) != width {
			t.Fatalf("bucket %d starts %v after the one before, want %v", i, m.Start.Sub(s[i-1].Start), width)
		}
	}
	if admitted+denied != int64(n) || denied != int64((n+2)/3) || len(s) > maxBuckets {
		t.Errorf("%d admitted, %d denied in %d buckets of %v; want %d requests, %d denied", admitted, denied, len(s), width, n, (n+2)/3)
	}
}

// TestTimeRange checks that lines outside the years the replay decides in
// are bad lines, in both formats: from 1970 in process, from 2000 through
// the engine's script, to 2250 for both; and that the bounds are within
// the engine's: the script decider (engine.WithClock) replays a line at
// either end of its range.
func TestTimeRange(t *testing.T) {
	t.Parallel()
	y1970, y2000 := time.Date(1970, 1, 1, 0, 0, 0, 0, time.UTC), time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)
	last := time.Date(2249, 12, 31, 23, 59, 59, 0, time.UTC)
	log := clfAt(y1970.Add(-time.Second)) + clfAt(y1970) + clfAt(y2000.Add(-time.Second)) + clfAt(y2000) +
		clfAt(last) + clfAt(last.Add(time.Second)) + clfAt(time.Date(9999, 1, 1, 0, 0, 0, 0, time.UTC))
	for _, tt := range []struct {
		decider     string
		requests    int64
		first       time.Time
		bad         []string // line: reason
		badRequests int64
	}{
		{InProcess, 4, y1970, []string{"1:", "outside the years 1970 to 2249", "6:", "outside", "7:", "outside"}, 3},
		{Script, 2, y2000, []string{"1:", "outside", "2:", "before 2000", "3:", "before 2000", "6:", "outside", "7:", "outside"}, 5},
	} {
		rep, err := Run(context.Background(), Config{Routes: []RouteRules{{Text: "ip:1/s"}}, Decider: tt.decider,
			Inputs: []Input{{Name: "x.log", R: strings.NewReader(log)}}})
		if err != nil {
			t.Fatalf("%s: %v", tt.decider, err)
		}
		if rep.Requests != tt.requests || rep.Bad != tt.badRequests || !rep.First.Equal(tt.first) || !rep.Last.Equal(last) {
			t.Errorf("%s: %d requests from %v to %v, %d bad %q", tt.decider, rep.Requests, rep.First, rep.Last, rep.Bad, rep.BadFirst)
			continue
		}
		for i := 0; i < len(tt.bad); i += 2 {
			if l := rep.BadFirst[i/2]; !strings.HasPrefix(l, "x.log:"+tt.bad[i]) || !strings.Contains(l, tt.bad[i+1]) {
				t.Errorf("%s: bad line %q, want line %s%s", tt.decider, l, tt.bad[i], tt.bad[i+1])
			}
		}
	}
	// JSON lines: RFC 3339, seconds and milliseconds, and numbers past
	// int64's range in microseconds.
	js := `{"time": "2026-11-25T10:00:00Z", "ip": "192.0.2.1", "request": "GET / HTTP/1.1", "status": 200}
{"time": "9999-12-31T23:59:59Z", "ip": "192.0.2.1", "request": "GET / HTTP/1.1", "status": 200}
{"time": 99999999999, "ip": "192.0.2.1", "request": "GET / HTTP/1.1", "status": 200}
{"time": 1e20, "ip": "192.0.2.1", "request": "GET / HTTP/1.1", "status": 200}
{"time": 1e300, "ip": "192.0.2.1", "request": "GET / HTTP/1.1", "status": 200}
{"time": "1969-12-31T23:59:59Z", "ip": "192.0.2.1", "request": "GET / HTTP/1.1", "status": 200}
{"time": ` + fmt.Sprint(t0.Add(time.Second).UnixMilli()) + `, "ip": "192.0.2.1", "request": "GET / HTTP/1.1", "status": 200}
`
	rep, err := runText(t, Config{Routes: []RouteRules{{Text: "ip:1/s"}}, Inputs: []Input{{Name: "x.jsonl", R: strings.NewReader(js)}}})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Requests != 2 || rep.Bad != 5 || len(rep.Minutes) > 2 {
		t.Errorf("JSON lines: %d requests, %d bad %q, %d buckets", rep.Requests, rep.Bad, rep.BadFirst, len(rep.Minutes))
	}
}

// longLog is an io.Reader of a log whose second line is n bytes long,
// made as it is read so that the test holds none of it.
type longLog struct {
	head, tail string
	n          int
	done       int
}

func (l *longLog) Read(p []byte) (int, error) {
	switch {
	case l.head != "":
		k := copy(p, l.head)
		l.head = l.head[k:]
		return k, nil
	case l.done < l.n:
		k := min(len(p), l.n-l.done)
		for i := range k {
			p[i] = 'x'
		}
		l.done += k
		return k, nil
	case l.tail != "":
		k := copy(p, l.tail)
		l.tail = l.tail[k:]
		return k, nil
	}
	return 0, io.EOF
}

// TestLongLine checks that a line over MaxLine is a bad line, skipped
// without being held, and the lines around it are replayed; a line of
// MaxLine bytes is read. It used to abort the whole run ("token too
// long"). Not parallel: it measures allocations.
func TestLongLine(t *testing.T) {
	good := clfAt(t0)
	// A valid line of exactly MaxLine bytes, "\r\n" excluded: its user
	// agent is padded.
	exact := strings.TrimSuffix(good, "\"test\"\n")
	exact += "\"" + strings.Repeat("a", MaxLine-len(exact)-2) + "\"\r\n"
	for _, tt := range []struct {
		name      string
		n         int // bytes of the long line
		requests  int64
		bad       int64
		maxAllocs uint64
	}{
		{"1 MiB and a byte", MaxLine + 1, 4, 1, 16 << 20},
		{"64 MiB", 64 << 20, 4, 1, 16 << 20},
		{"2 MiB at the end, without a newline", 2 << 20, 4, 1, 16 << 20},
	} {
		l := &longLog{head: good + good, n: tt.n, tail: "\n" + good + exact}
		if strings.Contains(tt.name, "at the end") {
			l.head, l.tail = good+good+good+exact, ""
		}
		var rep *Report
		var err error
		bytes := allocated(func() {
			rep, err = runText(t, Config{Routes: []RouteRules{{Text: "ip:100/s"}}, Inputs: []Input{{Name: "x.log", R: l}}})
		})
		if err != nil {
			t.Fatalf("%s: %v", tt.name, err)
		}
		if rep.Requests != tt.requests || rep.Bad != tt.bad || rep.Lines != 5 {
			t.Errorf("%s: %d lines, %d requests, %d bad %q; want 5, %d, %d", tt.name, rep.Lines, rep.Requests, rep.Bad, rep.BadFirst, tt.requests, tt.bad)
		}
		if len(rep.BadFirst) != 1 || !strings.Contains(rep.BadFirst[0], "longer than 1048576 bytes") {
			t.Errorf("%s: bad lines %q", tt.name, rep.BadFirst)
		}
		t.Logf("%s: %d KB allocated", tt.name, bytes>>10)
		if bytes > tt.maxAllocs {
			t.Errorf("%s: the run allocated %d MB", tt.name, bytes>>20)
		}
	}
}
