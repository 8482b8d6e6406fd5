package engine

import (
	"context"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/slidelimit/slidelimit/engine/internal/plan"
	"github.com/slidelimit/slidelimit/internal/redistest"
	"github.com/slidelimit/slidelimit/internal/ruletime"
	"github.com/slidelimit/slidelimit/rules"
)

// calWin is a calendar window of limit per c.
func calWin(limit int64, c string) rules.Window {
	return rules.Window{Limit: limit, Calendar: c}
}

// zone loads a time zone or fails the test.
func zone(t *testing.T, name string) *time.Location {
	t.Helper()
	loc, err := ruletime.LoadZone(name)
	if err != nil {
		t.Fatal(err)
	}
	return loc
}

// calStep is one step of a calendar scenario: at a wall time in the
// scenario's zone, an Allow (or a Peek) that must be admitted or denied
// with a Retry-After; used, when >= 0, is what the calendar window
// reports (the first calendar window of the request).
type calStep struct {
	at    time.Time
	peek  bool
	allow bool
	retry time.Duration
	used  int64
}

// runCal runs steps of r on e at the times of clk.
func runCal(t *testing.T, e *Engine, clk *redistest.Clock, r Request, steps []calStep) []Decision {
	t.Helper()
	ctx := context.Background()
	var ds []Decision
	for i, s := range steps {
		clk.SetTime(s.at)
		var d Decision
		var err error
		if s.peek {
			d, err = e.peek(ctx, r)
		} else {
			d, err = e.Allow(ctx, r)
		}
		localOK(t, e, err)
		if d.Allowed != s.allow || d.RetryAfter != s.retry {
			t.Fatalf("step %d at %v: allowed %v retry %v, want %v %v (%+v)", i, s.at, d.Allowed, d.RetryAfter, s.allow, s.retry, d)
		}
		if s.used >= 0 {
			if ws := calState(t, d); ws.Used != s.used {
				t.Fatalf("step %d at %v: calendar window used %d, want %d", i, s.at, ws.Used, s.used)
			}
		}
		ds = append(ds, d)
	}
	return ds
}

// calState returns the state of the first calendar window of d.
func calState(t *testing.T, d Decision) WindowState {
	t.Helper()
	for _, ws := range d.Windows {
		if ws.Window.Calendar != "" {
			return ws
		}
	}
	t.Fatalf("no calendar window in %+v", d)
	return WindowState{}
}

// TestCalendar runs the calendar scenarios on real Redis, miniredis, a
// 3-master cluster, a Ring and the fallback limiter, with and without
// cached denials, under the engine's test clock.
func TestCalendar(t *testing.T) {
	t.Parallel()
	scenarios := []struct {
		name string
		run  func(t *testing.T, e *Engine, clk *redistest.Clock)
	}{
		{"shanghai month", calShanghai},
		{"february", calFebruary},
		{"new york dst", calNewYork},
		{"all or nothing", calAllOrNothing},
		{"settle and give back", calSettle},
	}
	for _, b := range testBackends(t) {
		for _, cached := range []bool{false, true} {
			for _, sc := range scenarios {
				t.Run(b.name+cacheName(cached)+"/"+sc.name, func(t *testing.T) {
					t.Parallel()
					prefix := redistest.Prefix(t)
					if b.ttl != nil {
						b.ttl(t, prefix)
					}
					clk := redistest.NewClock()
					opts := append([]Option{WithKeyPrefix(prefix), WithClock(clk.Now), WithCachedDenials(cached)}, b.opts...)
					sc.run(t, newEngine(t, b.c, opts...), clk)
				})
			}
		}
	}
}

// calShanghai: 3/calendar month in Asia/Shanghai. The 4th request at
// 23:59:50 on the month's last day is refused with Retry-After 10; at
// local midnight on the 1st three are admitted again.
func calShanghai(t *testing.T, e *Engine, clk *redistest.Clock) {
	sh := zone(t, "Asia/Shanghai")
	r := req(user("u", calWin(3, ruletime.Month)))
	r.Zone = sh
	last := time.Date(2030, 1, 31, 23, 59, 50, 0, sh)
	feb := time.Date(2030, 2, 1, 0, 0, 0, 0, sh)
	runCal(t, e, clk, r, []calStep{
		{at: time.Date(2030, 1, 1, 0, 0, 0, 0, sh), allow: true, used: 1},
		{at: time.Date(2030, 1, 15, 12, 0, 0, 0, sh), allow: true, used: 2},
		{at: time.Date(2030, 1, 31, 23, 0, 0, 0, sh), allow: true, used: 3},
		{at: last, retry: 10 * time.Second, used: 3},
		{at: last.Add(9 * time.Second), retry: time.Second, used: 3},
		{at: feb, allow: true, used: 1},
		{at: feb, allow: true, used: 2},
		{at: feb.Add(time.Second), allow: true, used: 3},
		{at: feb.Add(2 * time.Second), retry: 28*24*time.Hour - 2*time.Second, used: 3},
	})
}

// calFebruary: a leap February lasts 29 days, in UTC (the default zone).
func calFebruary(t *testing.T, e *Engine, clk *redistest.Clock) {
	r := req(user("u", calWin(1, ruletime.Month)))
	feb := time.Date(2032, 2, 1, 0, 0, 0, 0, time.UTC)
	runCal(t, e, clk, r, []calStep{
		{at: feb, allow: true, used: 1},
		{at: feb.Add(time.Second), retry: 29*24*time.Hour - time.Second, used: 1},
		{at: time.Date(2032, 2, 29, 12, 0, 0, 0, time.UTC), retry: 12 * time.Hour, used: 1},
		{at: time.Date(2032, 3, 1, 0, 0, 0, 0, time.UTC), allow: true, used: 1},
	})
}

// calNewYork: 2/calendar day in America/New_York across both changes of
// 2030: March 10 lasts 23 hours, November 3 25 hours.
func calNewYork(t *testing.T, e *Engine, clk *redistest.Clock) {
	ny := zone(t, "America/New_York")
	r := req(user("u", calWin(2, ruletime.Day)))
	r.Zone = ny
	spring := time.Date(2030, 3, 10, 0, 0, 0, 0, ny)
	fall := time.Date(2030, 11, 3, 0, 0, 0, 0, ny)
	runCal(t, e, clk, r, []calStep{
		{at: spring, allow: true, used: 1},
		{at: spring.Add(time.Hour), allow: true, used: 2},
		{at: spring.Add(2 * time.Hour), retry: 21 * time.Hour, used: 2},
		{at: spring.Add(23*time.Hour - time.Second), retry: time.Second, used: 2},
		{at: spring.Add(23 * time.Hour), allow: true, used: 1}, // March 11, 00:00
		{at: fall, allow: true, used: 1},
		{at: fall.Add(time.Hour), allow: true, used: 2},
		{at: fall.Add(2 * time.Hour), retry: 23 * time.Hour, used: 2},
		{at: fall.Add(24 * time.Hour), retry: time.Hour, used: 2}, // 23:00 local
		{at: fall.Add(25 * time.Hour), allow: true, used: 1},      // November 4, 00:00
	})
}

// calAllOrNothing: a denial by the calendar window counts nothing in the
// sliding windows of the group, and a denial by a sliding window nothing
// in the calendar window, whether they share a rule or not (an ip
// rule, in another cluster slot), before or after it.
func calAllOrNothing(t *testing.T, e *Engine, clk *redistest.Clock) {
	ctx := context.Background()
	day := time.Date(2030, 6, 3, 0, 0, 0, 0, time.UTC)
	shared := req(user("u", win(2, time.Minute), calWin(3, ruletime.Day)))
	apart := req(user("v", win(2, time.Minute)), ip("1.2.3.4", calWin(3, ruletime.Day)))
	// The calendar key first: it counts at once, and takes the count back
	// when a later key denies.
	before := req(ip("5.6.7.8", calWin(3, ruletime.Day)), user("w", win(2, time.Minute)))
	for _, r := range []Request{shared, apart, before} {
		runCal(t, e, clk, r, []calStep{
			{at: day, allow: true, used: 1},
			{at: day.Add(time.Second), allow: true, used: 2},
			// The minute's window is full: the calendar counts nothing.
			{at: day.Add(2 * time.Second), retry: 58 * time.Second, used: 2},
			{at: day.Add(3 * time.Second), peek: true, retry: 57 * time.Second, used: 2},
			{at: day.Add(time.Minute), allow: true, used: 3},
			// The day is full: the minute's window counts nothing.
			{at: day.Add(2 * time.Minute), retry: 24*time.Hour - 2*time.Minute, used: 3},
		})
		clk.SetTime(day.Add(2*time.Minute + time.Second))
		d, err := e.peek(ctx, r)
		localOK(t, e, err)
		for _, ws := range d.Windows {
			if ws.Window.Calendar == "" && ws.Used != 0 {
				t.Fatalf("sliding window after the calendar's denial: used %d, want 0 (%+v)", ws.Used, d)
			}
		}
		day = day.Add(24 * time.Hour)
	}
}

// calSettle: settlement and give-back take from the calendar window's
// counter of the request's own period, never below zero.
func calSettle(t *testing.T, e *Engine, clk *redistest.Clock) {
	ctx := context.Background()
	day := time.Date(2030, 6, 3, 10, 0, 0, 0, time.UTC)
	r := func(cost int64) Request {
		return req(bytesOf("u", cost, calWin(100, ruletime.Day)))
	}
	used := func(at time.Time) int64 {
		t.Helper()
		clk.SetTime(at)
		d, err := e.peek(ctx, r(1))
		localOK(t, e, err)
		return calState(t, d).Used
	}
	ds := runCal(t, e, clk, r(60), []calStep{{at: day, allow: true, used: 60}})
	a := ds[0]
	ds = runCal(t, e, clk, r(30), []calStep{{at: day.Add(time.Second), allow: true, used: 90}})
	b := ds[0]
	// Settling a to 10 gives 50 back.
	if err := e.settle(ctx, r(60), a, []int64{10}); err != nil {
		localOK(t, e, err)
	}
	if u := used(day.Add(2 * time.Second)); u != 40 {
		t.Fatalf("after settling 60 to 10: used %d, want 40", u)
	}
	// Giving b back takes its 30 out.
	localOK(t, e, e.giveBack(ctx, r(30), b))
	if u := used(day.Add(3 * time.Second)); u != 10 {
		t.Fatalf("after giving 30 back: used %d, want 10", u)
	}
	// a was settled: it is not given back as well.
	localOK(t, e, e.giveBack(ctx, r(60), a))
	if u := used(day.Add(3 * time.Second)); u != 10 {
		t.Fatalf("after giving back a settled request: used %d, want 10", u)
	}
	// A request of the previous day given back leaves today's counter.
	next := day.Add(24 * time.Hour)
	ds = runCal(t, e, clk, r(20), []calStep{{at: next, allow: true, used: 20}})
	localOK(t, e, e.giveBack(ctx, r(60), a))
	if u := used(next.Add(time.Second)); u != 20 {
		t.Fatalf("after giving back yesterday's request: used %d, want 20", u)
	}
	if e.fail == rules.FailLocal {
		return // Reset of the fallback forgets the local entries: nothing to give back below
	}
	// A reset empties the counter; giving back a request counted before
	// it refunds no one else's cost and goes no lower than zero.
	localOK(t, e, e.resetSubject(ctx, "s", r(1).Checks[0].Rule, "u"))
	runCal(t, e, clk, r(5), []calStep{{at: next.Add(2 * time.Second), allow: true, used: 5}})
	localOK(t, e, e.giveBack(ctx, r(20), ds[0]))
	if u := used(next.Add(3 * time.Second)); u != 0 {
		t.Fatalf("after a refund of 20 from 5: used %d, want 0", u)
	}
	runCal(t, e, clk, r(100), []calStep{{at: next.Add(4 * time.Second), allow: true, used: 100}})
}

// TestCalendarTTL checks on real Redis that a calendar key expires after
// its period ends, relative to the script's (test) time, and holds one
// field: the current period's count.
func TestCalendarTTL(t *testing.T) {
	t.Parallel()
	_, rc := redistest.StartClient(t)
	prefix := redistest.Prefix(t)
	clk := redistest.NewClock()
	e := newEngine(t, rc, WithKeyPrefix(prefix), WithClock(clk.Now))
	ctx := context.Background()
	sh := zone(t, "Asia/Shanghai")
	at := time.Date(2030, 1, 31, 20, 0, 0, 0, sh)
	clk.SetTime(at)
	r := req(user("u", win(5, time.Minute), calWin(3, ruletime.Month)))
	r.Zone = sh
	if d, err := e.Allow(ctx, r); err != nil || !d.Allowed {
		t.Fatalf("allow: %+v, %v", d, err)
	}
	var cal string
	for _, k := range scanKeys(t, rc, prefix) {
		if strings.Contains(k, plan.CalSuffix) {
			cal = k
		}
	}
	if cal == "" {
		t.Fatal("no calendar key")
	}
	left := 4 * time.Hour // to Shanghai's February
	ttl, err := rc.PTTL(ctx, cal).Result()
	if err != nil || ttl <= left || ttl > left+2*time.Second {
		t.Fatalf("PTTL %v, %v; want just over %v", ttl, err, left)
	}
	v, err := rc.HGetAll(ctx, cal).Result()
	start := strconv.FormatInt(time.Date(2030, 1, 1, 0, 0, 0, 0, sh).UnixMicro(), 10)
	if err != nil || len(v) != 1 || v[start] != "1" {
		t.Fatalf("counter %v, %v; want {START: 1}", v, err)
	}
	// A denial by another window (the minute's 5) counts nothing in the
	// period, and leaves the expiry as it was.
	r30 := req(user("u", win(5, time.Minute), calWin(30, ruletime.Month)))
	r30.Zone = sh
	for range 4 {
		if d, err := e.Allow(ctx, r30); err != nil || !d.Allowed {
			t.Fatalf("allow: %+v, %v", d, err)
		}
	}
	if d, _ := e.Allow(ctx, r30); d.Allowed {
		t.Fatalf("the minute's sixth request admitted: %+v", d)
	}
	if v, _ := rc.HGet(ctx, cal, start).Result(); v != "5" {
		t.Fatalf("count %q after a denial by the minute, want 5", v)
	}
	// The next period's first admission drops the old period's field.
	clk.SetTime(time.Date(2030, 2, 1, 0, 0, 1, 0, sh))
	if d, err := e.Allow(ctx, r); err != nil || !d.Allowed {
		t.Fatalf("allow in February: %+v, %v", d, err)
	}
	if v, _ := rc.HGetAll(ctx, cal).Result(); len(v) != 1 || v[start] != "" {
		t.Fatalf("fields %v in February, want only February's", v)
	}
}

// TestCalendarMemory proves on real Redis that a calendar window takes
// O(1) memory: 3,000 admissions of one subject grow used_memory by less
// than 32 KiB.
func TestCalendarMemory(t *testing.T) {
	t.Parallel()
	_, rc := redistest.StartClient(t)
	clk := redistest.NewClock()
	e := newEngine(t, rc, WithKeyPrefix(redistest.Prefix(t)), WithClock(clk.Now))
	ctx := context.Background()
	r := req(user("u", calWin(100_000, ruletime.Month)))
	// A first admission loads the script and makes the key.
	if _, err := e.Allow(ctx, r); err != nil {
		t.Fatal(err)
	}
	before := redistest.UsedMemory(t, rc)
	for i := range 3000 {
		clk.Set(time.Duration(i) * time.Second)
		if d, err := e.Allow(ctx, r); err != nil || !d.Allowed {
			t.Fatalf("admission %d: %+v, %v", i, d, err)
		}
	}
	after := redistest.UsedMemory(t, rc)
	t.Logf("used_memory %d -> %d (%+d bytes) for 3,000 admissions", before, after, after-before)
	if after-before >= 32<<10 {
		t.Fatalf("used_memory grew by %d bytes, want < 32 KiB", after-before)
	}
}

// TestCalendarConcurrent: concurrent requests batched into shared script
// calls admit exactly the calendar window's limit, on real Redis,
// miniredis and a cluster, and the counter holds what was admitted.
func TestCalendarConcurrent(t *testing.T) {
	t.Parallel()
	for _, b := range testBackends(t) {
		if b.name == "local" || b.name == "ring" {
			continue
		}
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			e := newEngine(t, b.c, WithKeyPrefix(redistest.Prefix(t)))
			r := req(user("u", win(1000, time.Minute), calWin(50, ruletime.Day)))
			var admitted atomic.Int64
			var wg sync.WaitGroup
			for range 200 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					d, err := e.Allow(context.Background(), r)
					if err != nil {
						t.Error(err)
					}
					if d.Allowed {
						admitted.Add(1)
					}
				}()
			}
			wg.Wait()
			d, err := e.peek(context.Background(), r)
			if err != nil {
				t.Fatal(err)
			}
			if admitted.Load() != 50 || calState(t, d).Used != 50 || d.Windows[0].Used != 50 {
				t.Fatalf("admitted %d, calendar used %d, minute used %d; want 50 each", admitted.Load(), calState(t, d).Used, d.Windows[0].Used)
			}
		})
	}
}

// TestCalendarUpgrade checks on real Redis and miniredis that a calendar
// counter of the earlier format (a string "START:COUNT") is read as a
// hash of the same count and expiry: an upgrade keeps the period's count.
func TestCalendarUpgrade(t *testing.T) {
	t.Parallel()
	_, rc := redistest.StartClient(t)
	_, mc := redistest.Mini(t)
	for name, c := range map[string]*redis.Client{"redis": rc, "miniredis": mc} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			prefix := redistest.Prefix(t)
			clk := redistest.NewClock()
			e := newEngine(t, c, WithKeyPrefix(prefix), WithClock(clk.Now))
			at := time.Date(2030, 1, 15, 12, 0, 0, 0, time.UTC)
			clk.SetTime(at)
			r := req(user("u", win(100, time.Minute), calWin(3, ruletime.Month)))
			if d, err := e.Allow(ctx, r); err != nil || !d.Allowed {
				t.Fatalf("allow: %+v, %v", d, err)
			}
			var cal string
			for _, k := range scanKeys(t, c, prefix) {
				if strings.Contains(k, plan.CalSuffix) {
					cal = k
				}
			}
			start := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC).UnixMicro()
			if err := c.Set(ctx, cal, strconv.FormatInt(start, 10)+":2", 10*time.Minute).Err(); err != nil {
				t.Fatal(err)
			}
			clk.Add(time.Second)
			d, err := e.Allow(ctx, r)
			if err != nil || !d.Allowed || calState(t, d).Used != 3 {
				t.Fatalf("allow over an old counter of 2: %+v, %v; want admitted, 3 used", d, err)
			}
			if d, _ := e.Allow(ctx, r); d.Allowed {
				t.Fatalf("fourth request of the month admitted: %+v", d)
			}
			if typ, _ := c.Type(ctx, cal).Result(); typ != "hash" {
				t.Fatalf("calendar key of type %q after the upgrade, want hash", typ)
			}
			if ttl, err := c.PTTL(ctx, cal).Result(); err != nil || ttl <= 9*time.Minute || ttl > 10*time.Minute {
				t.Fatalf("PTTL %v, %v after the upgrade; want the old one (10 min)", ttl, err)
			}
		})
	}
}

// TestCalendarBatchMixed checks that the ops of one script call on a
// calendar key count on from each other when their fields differ (limits
// and costs of several requests): the period's count is what the admitted
// requests counted, never above a limit they were admitted under.
func TestCalendarBatchMixed(t *testing.T) {
	t.Parallel()
	for _, b := range testBackends(t) {
		if b.name == "local" || b.name == "ring" {
			continue
		}
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			e := newEngine(t, b.c, WithKeyPrefix(redistest.Prefix(t)))
			lim := func(limit int64) rules.Rule {
				return rules.Rule{Kind: rules.User, Cost: "bytes", Windows: []rules.Window{calWin(limit, ruletime.Day)}}
			}
			var sum, over atomic.Int64
			var wg sync.WaitGroup
			for i := range 300 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					limit, cost := int64(500), int64(3+4*(i%2)) // 3 or 7
					if i%3 == 0 {
						limit = 300
					}
					r := Request{Scope: "s", Checks: []Check{{Rule: lim(limit), Subject: "u", Cost: cost}}, Fail: rules.FailClosed}
					d, err := e.Allow(context.Background(), r)
					if err != nil {
						t.Error(err)
					}
					if d.Allowed {
						sum.Add(cost)
						if calState(t, d).Used > limit {
							over.Add(1)
						}
					}
				}()
			}
			wg.Wait()
			d, err := e.peek(context.Background(), Request{Scope: "s", Checks: []Check{{Rule: lim(500), Subject: "u", Cost: 1}}})
			if err != nil {
				t.Fatal(err)
			}
			if used := calState(t, d).Used; used != sum.Load() || used > 500 || used < 500-7 || over.Load() > 0 {
				t.Fatalf("calendar used %d, admitted costs %d, %d admitted above their limit; want equal, in 493..500, none", used, sum.Load(), over.Load())
			}
		})
	}
}
