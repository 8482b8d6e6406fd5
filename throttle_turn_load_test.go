package slidelimit_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"runtime"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/slidelimit/slidelimit"
	"github.com/slidelimit/slidelimit/internal/redistest"
	"github.com/slidelimit/slidelimit/middleware"
)

// turnBound is the documented bound (docs/throttle.md, Fairness) on the
// time from the moment a lane's windows have room while callers wait to
// the next admission, on an idle machine.
const turnBound = 50 * time.Millisecond

// turnLoadFactor is how much longer a hand-off may take on a machine whose
// every core is busy: still far below the renewal (1.5 s) and the lease
// (3 s), which a stalled turn order used to wait for.
const turnLoadFactor = 8

// turnBlind is how long a PING may take; beyond it the test counts Redis,
// or the machine, as too starved to admit anyone.
const turnBlind = 10 * time.Millisecond

// TestThrottleTurnUnderLoad: three Limiters (processes) on one
// redis-server drive callers through one lane of a throttle while two busy
// loops per core keep the machine's cores busy. Callers come in waves, each
// released at once in every process onto a window that is often still
// full, so that every process joins the fleet's order together; two
// thirds of each wave give up together after 50..250 ms, so that several
// heads of a process leave at once and its queue empties. Whenever the window had room while a caller waited, the next
// admission came within turnBound × turnLoadFactor: never after a renewal
// (1.5 s) or a lease (3 s).
func TestThrottleTurnUnderLoad(t *testing.T) {
	srv := redistest.Start(t)
	const (
		limit   = 5
		period  = 200 * time.Millisecond
		perWave = 6 // callers per process and wave
		run     = 6 * time.Second
	)
	prefix := randomPrefix(t)
	var mu sync.Mutex
	var admitted []time.Time // every admission, given back ones too, Redis clock
	hook := slidelimit.WithHook(func(ev middleware.Event) {
		if ev.Allowed {
			mu.Lock()
			admitted = append(admitted, ev.Decision.Time)
			mu.Unlock()
		}
	})
	var ths []*slidelimit.Throttle
	for range 3 {
		c := redis.NewClient(&redis.Options{Addr: srv.Addr, ContextTimeoutEnabled: true})
		t.Cleanup(func() { c.Close() })
		th, err := throttleLimiter(t, c, prefix, hook).Throttle("api", fmt.Sprintf("global:%d/%dms", limit, period.Milliseconds()))
		if err != nil {
			t.Fatal(err)
		}
		ths = append(ths, th)
	}
	ctx, cancel := context.WithTimeout(context.Background(), run)
	defer cancel()
	// Two busy loops per core stand for other work on the machine: given
	// Ps of their own, they take the cores from this process's goroutines
	// through the OS scheduler, as other processes would, rather than
	// through the Go scheduler's 10 ms preemption.
	spinners := runtime.NumCPU() * 2
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(runtime.GOMAXPROCS(0) + spinners))
	var busy sync.WaitGroup
	for range spinners {
		busy.Go(func() {
			for n := 0; ctx.Err() == nil; n++ {
			}
		})
	}
	defer func() {
		cancel()
		busy.Wait()
	}()
	// Moments when Redis, or this process, was too starved to answer a
	// PING: a PING's time beyond turnBlind does not count as time with
	// room, since every hand-off waits for Redis as long (a loaded machine
	// stalled everything for 850 ms once, tallies timing out).
	var blind []span
	var probe sync.WaitGroup
	probe.Go(func() {
		c := redis.NewClient(&redis.Options{Addr: srv.Addr})
		defer c.Close()
		for ctx.Err() == nil {
			sent := time.Now()
			c.Ping(context.Background())
			if got := time.Now(); got.Sub(sent) > turnBlind {
				mu.Lock()
				blind = append(blind, span{sent.Add(turnBlind), got})
				mu.Unlock()
			}
			time.Sleep(5 * time.Millisecond)
		}
	})
	start := time.Now()
	var waits []span // when each caller waited, local clock (the same host's)
	var wg sync.WaitGroup
	for ctx.Err() == nil {
		leave := time.Now().Add(time.Duration(50+rand.IntN(200)) * time.Millisecond)
		for i := range 3 * perWave {
			th := ths[i%3]
			wg.Go(func() {
				wctx, wcancel := ctx, context.CancelFunc(func() {})
				if i >= 3*perWave/3 {
					wctx, wcancel = context.WithDeadline(ctx, leave)
				}
				defer wcancel()
				arrived := time.Now()
				p, err := th.Wait(wctx, slidelimit.Call{})
				end := time.Now()
				if d, ok := wctx.Deadline(); ok && d.Before(end) {
					end = d // not a waiter once its context ended
				}
				if err == nil {
					end = p.Decision().Time
					p.Finish(nil)
				}
				mu.Lock()
				waits = append(waits, span{arrived, end})
				mu.Unlock()
			})
		}
		select {
		case <-ctx.Done():
		case <-time.After(time.Duration(400+rand.IntN(400)) * time.Millisecond):
		}
	}
	wg.Wait()
	probe.Wait()
	mu.Lock()
	defer mu.Unlock()
	worst, at, hands := longestStall(admitted, waits, blind, limit, period, start)
	var lost time.Duration
	for _, b := range blind {
		lost += b.to.Sub(b.from)
	}
	t.Logf("%d admissions, %d waits; longest time with room and a caller waiting before the next admission: %v (at +%v), over %d hand-offs; Redis slower than %v to answer for %v in all",
		len(admitted), len(waits), worst.Round(time.Millisecond), at.Sub(start).Round(time.Millisecond), hands, turnBlind, lost.Round(time.Millisecond))
	if len(admitted) < 3*limit {
		t.Fatalf("only %d admissions in %v", len(admitted), run)
	}
	if worst > turnBound*turnLoadFactor {
		t.Errorf("the window had room while a caller waited for %v before the next admission, want at most %v",
			worst.Round(time.Millisecond), turnBound*turnLoadFactor)
	}
}

// span is a time interval [from, to).
type span struct{ from, to time.Time }

// longestStall returns the longest time during which a window of limit
// calls per period had room and some caller waited, with no admission,
// from the admissions' times and the callers' waits; where it began; and
// the number of gaps between admissions looked at. After admission k (in
// time order) the window has room once admission k-limit+1 has left it.
// Admissions that were given back count as if they had stayed (the
// window had at least the room assumed here), a caller counts as waiting
// only from its call to its admission or its context's end, and the time
// within the blind spans does not count.
func longestStall(admitted []time.Time, waits, blind []span, limit int, period time.Duration, since time.Time) (time.Duration, time.Time, int) {
	a := slices.Clone(admitted)
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
		if !next.After(room) || room.Before(since) {
			continue
		}
		n++
		// The parts of [room, next) when some caller waited: merge the
		// waits that overlap it, in order of their start.
		var cur span
		for _, s := range w {
			if !s.from.Before(next) {
				break
			}
			from, to := later(s.from, room), earlier(s.to, next)
			if !from.Before(to) {
				continue
			}
			if cur.to.IsZero() || from.After(cur.to) {
				cur = span{from, to}
			} else if to.After(cur.to) {
				cur.to = to
			}
			if d := cur.to.Sub(cur.from) - overlap(cur, blind); d > worst {
				worst, at = d, cur.from
			}
		}
	}
	return worst, at, n
}

// overlap returns how much of s the spans of blind cover; they do not
// overlap each other (a probe's PINGs follow one another).
func overlap(s span, blind []span) time.Duration {
	var d time.Duration
	for _, b := range blind {
		if from, to := later(s.from, b.from), earlier(s.to, b.to); from.Before(to) {
			d += to.Sub(from)
		}
	}
	return d
}

func later(x, y time.Time) time.Time {
	if x.After(y) {
		return x
	}
	return y
}

func earlier(x, y time.Time) time.Time {
	if x.Before(y) {
		return x
	}
	return y
}

// TestLongestStallBlind: time when Redis could not answer does not count
// as a stall; the rest of the gap does.
func TestLongestStallBlind(t *testing.T) {
	t0 := time.Now()
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	admitted := []time.Time{at(0), at(1000)} // 1 per 100ms: room from 100 ms
	waits := []span{{at(0), at(1000)}}
	if worst, _, _ := longestStall(admitted, waits, nil, 1, 100*time.Millisecond, t0); worst != 900*time.Millisecond {
		t.Fatalf("stall %v, want 900ms", worst)
	}
	blind := []span{{at(200), at(700)}, {at(950), at(1100)}}
	if worst, _, _ := longestStall(admitted, waits, blind, 1, 100*time.Millisecond, t0); worst != 350*time.Millisecond {
		t.Fatalf("stall %v with Redis blind 550 ms of it, want 350ms", worst)
	}
}
