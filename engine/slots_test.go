package engine

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/slidelimit/slidelimit/engine/internal/slots"
	"github.com/slidelimit/slidelimit/internal/redistest"
	"github.com/slidelimit/slidelimit/lua"
	"github.com/slidelimit/slidelimit/rules"
)

func conc(n int64) rules.Window { return rules.Window{Limit: n, Concurrent: true} }

// slotsUsed returns the live slots of the check's in-flight window as Peek
// reports them.
func slotsUsed(t *testing.T, e *Engine, req Request) int64 {
	t.Helper()
	d, err := e.peek(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	for _, ws := range d.Windows {
		if ws.Window.Concurrent {
			if ws.Remaining != ws.Window.Limit-ws.Used {
				t.Errorf("Remaining %d, Used %d of %d", ws.Remaining, ws.Used, ws.Window.Limit)
			}
			return ws.Used
		}
	}
	t.Fatal("no in-flight window in the decision")
	return 0
}

// TestSlotsExact runs 64 concurrent requests through two engines on
// user:3 concurrent, whose handlers block until the test lets them end:
// exactly 3 run at once, the others are denied with the in-flight window
// and a RetryAfter of 1 s, and the slots come back when the handlers end,
// twice over. On one server and on the 3-master cluster.
func TestSlotsExact(t *testing.T) {
	t.Parallel()
	t.Run("server", func(t *testing.T) {
		t.Parallel()
		_, c := redistest.StartClient(t)
		slotsExact(t, c, c)
	})
	t.Run("cluster", func(t *testing.T) {
		t.Parallel()
		cl := redistest.StartCluster(t)
		slotsExact(t, cl.Client(t), cl.Client(t))
	})
}

func slotsExact(t *testing.T, c1, c2 Client) {
	prefix := redistest.Prefix(t)
	es := []*Engine{newEngine(t, c1, WithKeyPrefix(prefix)), newEngine(t, c2, WithKeyPrefix(prefix))}
	req := One("reports", rules.User, "alice", conc(3))
	ctx := context.Background()
	for round := range 2 {
		var running, peak, admitted, denied atomic.Int64
		var decided, ended sync.WaitGroup
		release := make(chan struct{})
		for i := range 64 {
			decided.Add(1)
			ended.Add(1)
			go func() {
				defer ended.Done()
				e := es[i%2]
				d, err := e.Allow(ctx, req)
				if err != nil {
					t.Error(err)
				}
				if !d.Allowed {
					denied.Add(1)
					if !d.Denied.Window.Concurrent || d.RetryAfter != time.Second || d.Denied.Used != 3 {
						t.Errorf("denial %+v, want by the in-flight window after 1s", d)
					}
					decided.Done()
					return
				}
				admitted.Add(1)
				n := running.Add(1)
				for {
					p := peak.Load()
					if n <= p || peak.CompareAndSwap(p, n) {
						break
					}
				}
				decided.Done()
				<-release // the handler's work
				running.Add(-1)
				if err := e.release(ctx, req, d); err != nil {
					t.Error(err)
				}
			}()
		}
		decided.Wait()
		if admitted.Load() != 3 || denied.Load() != 61 || peak.Load() != 3 {
			t.Errorf("round %d: admitted %d, denied %d, at most %d running at once; want 3, 61, 3",
				round, admitted.Load(), denied.Load(), peak.Load())
		}
		if got := slotsUsed(t, es[0], req); got != 3 {
			t.Errorf("round %d: %d slots used while 3 handlers run", round, got)
		}
		close(release)
		ended.Wait()
		if got := slotsUsed(t, es[1], req); got != 0 {
			t.Errorf("round %d: %d slots used after every handler ended", round, got)
		}
	}
}

// TestSlotsAllOrNothing: a request refused anywhere holds no slot and
// counts in no window: refused for its IP's slot, it uses nothing of its
// user's windows and slots; refused by a full rate window, it takes no
// slot. On one server and on the cluster (where the keys live in
// different slots and a refusal rolls back the parts that admitted).
func TestSlotsAllOrNothing(t *testing.T) {
	t.Parallel()
	t.Run("server", func(t *testing.T) {
		t.Parallel()
		_, c := redistest.StartClient(t)
		slotsAllOrNothing(t, c)
	})
	t.Run("cluster", func(t *testing.T) {
		t.Parallel()
		cl := redistest.StartCluster(t)
		slotsAllOrNothing(t, cl.Client(t))
	})
}

func slotsAllOrNothing(t *testing.T, c Client) {
	ctx := context.Background()
	e := newEngine(t, c, WithKeyPrefix(redistest.Prefix(t)))
	req := func(ip, user string) Request {
		return Request{Scope: "files", Checks: []Check{
			{Rule: rules.Rule{Kind: rules.User, Windows: []rules.Window{win(5, time.Minute), conc(2)}}, Subject: user},
			{Rule: rules.Rule{Kind: rules.IP, Windows: []rules.Window{conc(1)}}, Subject: ip},
		}}
	}
	a := req("10.0.0.1", "alice")
	d, err := e.Allow(ctx, a)
	if err != nil || !d.Allowed {
		t.Fatalf("first request: %+v, %v", d, err)
	}
	// Each user runs only from here on: try many, so that a leak shows.
	for _, user := range []string{"bob", "carol", "dave", "erin"} {
		b := req("10.0.0.1", user)
		for range 3 {
			db, err := e.Allow(ctx, b)
			if err != nil || db.Allowed || db.Denied.Check != 1 {
				t.Fatalf("request of %s from the busy IP: %+v, %v; want denied by the IP's slot", user, db, err)
			}
		}
		p, err := e.peek(ctx, req("10.0.0.2", user))
		if err != nil {
			t.Fatal(err)
		}
		if p.Windows[0].Used != 0 || p.Windows[1].Used != 0 {
			t.Errorf("%s's windows after refusals: %+v; want nothing used", user, p.Windows)
		}
	}
	if err := e.release(ctx, a, d); err != nil {
		t.Fatal(err)
	}
	// A full rate window: frank's 5/min are spent (each released at once).
	f := req("10.0.1.1", "frank")
	for i := range 5 {
		df, err := e.Allow(ctx, Request{Scope: f.Scope, Checks: f.Checks[:1]})
		if err != nil || !df.Allowed {
			t.Fatalf("frank's request %d: %+v, %v", i, df, err)
		}
		if err := e.release(ctx, Request{Scope: f.Scope, Checks: f.Checks[:1]}, df); err != nil {
			t.Fatal(err)
		}
	}
	df, err := e.Allow(ctx, f)
	if err != nil || df.Allowed || df.Denied.Window.Concurrent {
		t.Fatalf("frank past his rate: %+v, %v; want denied by 5/min", df, err)
	}
	if df.RetryAfter <= time.Second {
		t.Errorf("RetryAfter %v of a rate denial; want the window's wait", df.RetryAfter)
	}
	p, err := e.peek(ctx, f)
	if err != nil {
		t.Fatal(err)
	}
	if p.Windows[1].Used != 0 || p.Windows[2].Used != 0 {
		t.Errorf("slots after a rate denial: %+v; want none held", p.Windows)
	}
}

// TestSlotsRelease: double release frees one slot, a release never frees
// another request's slot, GiveBack releases, Reset frees all (and the
// renewals of the requests still running report their slots lost).
func TestSlotsRelease(t *testing.T) {
	t.Parallel()
	_, c := redistest.StartClient(t)
	ctx := context.Background()
	var lost atomic.Int64
	e := newEngine(t, c, WithKeyPrefix(redistest.Prefix(t)), WithLease(600*time.Millisecond),
		WithSlotLost(func(SlotLost) { lost.Add(1) }))
	l := rules.Rule{Kind: rules.User, Windows: []rules.Window{win(100, time.Minute), conc(2)}}
	req := Request{Scope: "r", Checks: []Check{{Rule: l, Subject: "u"}}}
	allow := func(want bool) Decision {
		t.Helper()
		d, err := e.Allow(ctx, req)
		if err != nil || d.Allowed != want {
			t.Fatalf("Allow: %+v, %v; want allowed %v", d, err, want)
		}
		return d
	}
	a, b := allow(true), allow(true)
	allow(false)
	for range 2 {
		if err := e.release(ctx, req, a); err != nil {
			t.Fatal(err)
		}
	}
	if got := slotsUsed(t, e, req); got != 1 {
		t.Fatalf("double release left %d slots used; want b's 1", got)
	}
	c2 := allow(true) // a's slot, not b's
	allow(false)
	if err := e.giveBack(ctx, req, b); err != nil {
		t.Fatal(err)
	}
	if got := slotsUsed(t, e, req); got != 1 {
		t.Fatalf("after GiveBack: %d slots used; want 1", got)
	}
	d, _ := e.peek(ctx, req)
	if d.Windows[0].Used != 2 {
		t.Errorf("rate window after GiveBack: %d used; want a's and c2's 2", d.Windows[0].Used)
	}
	allow(true)
	if err := e.resetSubject(ctx, "r", l, "u"); err != nil {
		t.Fatal(err)
	}
	if got := slotsUsed(t, e, req); got != 0 {
		t.Fatalf("after Reset: %d slots used", got)
	}
	// The two requests still running lose their slots at their next renewal.
	deadline := time.Now().Add(5 * time.Second)
	for lost.Load() < 2 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if lost.Load() != 2 {
		t.Errorf("%d lost slots reported after Reset; want 2", lost.Load())
	}
	if err := e.release(ctx, req, c2); err != nil {
		t.Fatal(err)
	}
	allow(true)
	allow(true)
	allow(false)
}

// TestSlotsRenewal: a request running for more than three leases keeps its
// slot, renewed by its engine, while another engine is denied throughout.
// On a failure it reports when each renewal was sent, how long it took and
// what it returned.
func TestSlotsRenewal(t *testing.T) {
	t.Parallel()
	s, c := redistest.StartClient(t)
	ctx := context.Background()
	prefix := redistest.Prefix(t)
	// Renewals every second, each allowed a quarter lease (a lease well
	// above three timeouts, as WithLease asks). A loaded CI machine (race
	// detector, parallel tests and builds, servers starting) ended shorter
	// leases: a 300 ms one renewed every 100 ms, and a 1 s one renewed
	// every 333 ms, once each. A slot lapses only when its process renews
	// nothing for a lease.
	lease := 3 * time.Second
	var lost atomic.Int64
	log := renewalLog{start: time.Now()}
	hc := s.Client()
	hc.AddHook(&log)
	holder := newEngine(t, hc, WithKeyPrefix(prefix), WithLease(lease), WithTimeout(lease/4),
		WithSlotLost(func(SlotLost) { lost.Add(1) }))
	other := newEngine(t, c, WithKeyPrefix(prefix), WithLease(lease))
	req := One("r", rules.User, "u", conc(1))
	d, err := holder.Allow(ctx, req)
	if err != nil || !d.Allowed {
		t.Fatal(d, err)
	}
	admitted := time.Now()
	end := admitted.Add(3*lease + lease/2)
	for time.Now().Before(end) {
		if o, err := other.Allow(ctx, req); err != nil || o.Allowed {
			t.Fatalf("other engine %v after the admission (%v after the start): %+v, %v; want denied while the slot is held; %d lost; renewals since the start:\n%s",
				time.Since(admitted), time.Since(log.start), o, err, lost.Load(), log.String())
		}
		time.Sleep(lease / 10)
	}
	if lost.Load() != 0 {
		t.Errorf("%d slots lost; renewals:\n%s", lost.Load(), log.String())
	}
	if err := holder.release(ctx, req, d); err != nil {
		t.Fatal(err)
	}
	if o, err := other.Allow(ctx, req); err != nil || !o.Allowed {
		t.Fatalf("after release: %+v, %v", o, err)
	}
}

// renewalLog records the renewal script calls of a client: when each was
// sent (since start), how long it took and what it returned.
type renewalLog struct {
	start time.Time // set before the client is used
	mu    sync.Mutex
	lines []string
}

func (l *renewalLog) DialHook(next redis.DialHook) redis.DialHook { return next }
func (l *renewalLog) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		return l.record(cmd.Name(), []redis.Cmder{cmd}, func() error { return next(ctx, cmd) })
	}
}
func (l *renewalLog) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		return l.record("pipeline", cmds, func() error { return next(ctx, cmds) })
	}
}

func (l *renewalLog) record(name string, cmds []redis.Cmder, send func() error) error {
	sent := time.Now()
	err := send()
	for _, cmd := range cmds {
		if isRenew(cmd) {
			l.mu.Lock()
			var got any = cmd.Err()
			if ic, ok := cmd.(*redis.IntSliceCmd); ok && ic.Err() == nil {
				got = ic.Val()
			}
			l.lines = append(l.lines, fmt.Sprintf("%v: %s (%s of %d) took %v: %v", sent.Sub(l.start).Round(time.Millisecond),
				cmd.Name(), name, len(cmds), time.Since(sent).Round(time.Millisecond), got))
			l.mu.Unlock()
			break
		}
	}
	return err
}

func (l *renewalLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Join(l.lines, "\n")
}

// batchCounter counts renewal script calls and the pipelines that carry
// them, per server.
type batchCounter struct {
	calls, pipes atomic.Int64
}

func (b *batchCounter) DialHook(next redis.DialHook) redis.DialHook { return next }
func (b *batchCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if isRenew(cmd) {
			b.calls.Add(1)
			b.pipes.Add(1)
		}
		return next(ctx, cmd)
	}
}
func (b *batchCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		n := 0
		for _, c := range cmds {
			if isRenew(c) {
				n++
			}
		}
		if n > 0 {
			b.calls.Add(int64(n))
			b.pipes.Add(1)
		}
		return next(ctx, cmds)
	}
}

func isRenew(cmd redis.Cmder) bool {
	a := cmd.Args()
	return len(a) > 1 && (a[1] == slots.ScriptHash() || a[1] == lua.Script("renew"))
}

// TestSlotsRenewalBatched: the renewals of 40 running requests on 40
// subjects are one script call per period on a server, and one pipeline
// per master and period on the cluster (one call per hash slot in it).
// Counted over 9 periods once every slot is held and the script loaded.
func TestSlotsRenewalBatched(t *testing.T) {
	t.Parallel()
	lease := 150 * time.Millisecond
	const periods = 9
	run := func(t *testing.T, c Client, b *batchCounter) {
		ctx := context.Background()
		e := newEngine(t, c, WithKeyPrefix(redistest.Prefix(t)), WithLease(lease))
		for i := range 40 {
			d, err := e.Allow(ctx, One("r", rules.User, "u"+strconv.Itoa(i), conc(1)))
			if err != nil || !d.Allowed {
				t.Fatal(d, err)
			}
		}
		time.Sleep(2 * lease / 3) // a period or two: the script is loaded everywhere
		b.calls.Store(0)
		b.pipes.Store(0)
		time.Sleep(periods * lease / 3)
	}
	t.Run("server", func(t *testing.T) {
		t.Parallel()
		s := redistest.Start(t)
		c := s.Client()
		var b batchCounter
		c.AddHook(&b)
		run(t, c, &b)
		if p := b.pipes.Load(); p < 1 || b.calls.Load() != p || p > periods+2 {
			t.Errorf("%d renewal calls in %d pipelines over %d periods; want one call per period", b.calls.Load(), p, periods)
		}
	})
	t.Run("cluster", func(t *testing.T) {
		t.Parallel()
		cl := redistest.StartCluster(t)
		var b batchCounter
		c := cl.ClientWith(t, &redis.ClusterOptions{})
		c.OnNewNode(func(n *redis.Client) { n.AddHook(&b) })
		run(t, c, &b)
		// 40 subjects hash to about 40 slots on 3 masters: a call per
		// slot, 13 or so per pipeline, a pipeline per master and period.
		if p, calls := b.pipes.Load(), b.calls.Load(); p < 3 || p > 3*(periods+2) || calls < 6*p {
			t.Errorf("%d renewal calls in %d pipelines over %d periods on 3 masters; want 3 pipelines per period", calls, p, periods)
		}
	})
}

// TestSlotsNoCachedDenial: in-flight windows make no cached denials, so a
// release in one process admits the next request in another at once.
func TestSlotsNoCachedDenial(t *testing.T) {
	t.Parallel()
	_, c := redistest.StartClient(t)
	ctx := context.Background()
	prefix := redistest.Prefix(t)
	a, b := newEngine(t, c, WithKeyPrefix(prefix)), newEngine(t, c, WithKeyPrefix(prefix))
	req := One("r", rules.User, "u", conc(1))
	d, err := b.Allow(ctx, req)
	if err != nil || !d.Allowed {
		t.Fatal(d, err)
	}
	for range 5 {
		da, err := a.Allow(ctx, req)
		if err != nil || da.Allowed || da.Source != "redis" {
			t.Fatalf("Allow on a full slot key: %+v, %v; want a denial from redis", da, err)
		}
	}
	if err := b.release(ctx, req, d); err != nil {
		t.Fatal(err)
	}
	if da, err := a.Allow(ctx, req); err != nil || !da.Allowed {
		t.Fatalf("Allow after the release elsewhere: %+v, %v", da, err)
	}
}

// TestSlotsLocal: the FailLocal fallback counts slots in process and
// releases them.
func TestSlotsLocal(t *testing.T) {
	t.Parallel()
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1})
	t.Cleanup(func() { c.Close() })
	e := newEngine(t, c, WithFailMode(rules.FailLocal), WithTimeout(50*time.Millisecond))
	ctx := context.Background()
	req := One("r", rules.User, "u", win(10, time.Minute), conc(2))
	var ds []Decision
	for i := range 3 {
		d, _ := e.Allow(ctx, req)
		if d.Source != "local" || d.Allowed != (i < 2) {
			t.Fatalf("request %d: %+v", i, d)
		}
		ds = append(ds, d)
	}
	if ds[2].RetryAfter != time.Second || !ds[2].Denied.Window.Concurrent {
		t.Errorf("local slot denial: %+v", ds[2])
	}
	if err := e.release(ctx, req, ds[0]); err != nil {
		t.Fatal(err)
	}
	if err := e.release(ctx, req, ds[0]); err != nil {
		t.Fatal(err)
	}
	if d, _ := e.Allow(ctx, req); !d.Allowed {
		t.Fatalf("after release: %+v", d)
	}
	if d, _ := e.Allow(ctx, req); d.Allowed {
		t.Fatalf("double release freed two slots: %+v", d)
	}
}

// TestSlotsRequestErrors: the engine refuses in-flight windows it cannot
// honour, naming the check and window.
func TestSlotsRequestErrors(t *testing.T) {
	t.Parallel()
	e := newEngine(t, redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"}))
	tests := []struct {
		name string
		c    Check
	}{
		{"cost", Check{Rule: rules.Rule{Kind: rules.User, Cost: "bytes", Windows: []rules.Window{conc(1)}}, Cost: 5}},
		{"period", Check{Rule: rules.Rule{Kind: rules.User, Windows: []rules.Window{{Limit: 1, Concurrent: true, Period: time.Second}}}}},
		{"limit", Check{Rule: rules.Rule{Kind: rules.User, Windows: []rules.Window{conc(0)}}}},
	}
	for _, tt := range tests {
		d, err := e.Allow(context.Background(), Request{Scope: "s", Checks: []Check{tt.c}})
		var re *requestError
		if d.Allowed || !errors.As(err, &re) || re.Check != 0 {
			t.Errorf("%s: %+v, %v; want a requestError of check 0", tt.name, d, err)
		}
	}
}

// TestSlotsKilledHolder: a child process holding slots is SIGKILLed; its
// slots free within one lease of its last renewal, while they stayed held
// (renewed) for several leases before.
func TestSlotsKilledHolder(t *testing.T) {
	t.Parallel()
	s := redistest.Start(t)
	c := s.Client()
	prefix := redistest.Prefix(t)
	lease := 2 * time.Second // the child may stall on a loaded machine: a lapse needs 2 s without a renewal
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), slotChildEnv+"="+s.Addr+"|"+prefix+"|"+lease.String())
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil || strings.TrimSpace(line) != "held 3" {
		t.Fatalf("child said %q, %v", line, err)
	}
	e := newEngine(t, c, WithKeyPrefix(prefix), WithLease(lease))
	req := slotChildRequest()
	ctx := context.Background()
	end := time.Now().Add(3 * lease)
	for time.Now().Before(end) {
		if d, err := e.Allow(ctx, req); err != nil || d.Allowed {
			t.Fatalf("Allow while the child runs: %+v, %v", d, err)
		}
		time.Sleep(lease / 5)
	}
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	for {
		d, err := e.Allow(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		if d.Allowed {
			break
		}
		// The last renewal came at most lease/3 before the kill; slack for
		// a busy machine.
		if time.Since(killed) > lease+time.Second {
			t.Fatalf("slots still held %v after SIGKILL with a lease of %v", time.Since(killed), lease)
		}
		time.Sleep(lease / 20)
	}
	if got := slotsUsed(t, e, req); got != 1 {
		t.Errorf("%d slots used after the child's expired; want only ours", got)
	}
}

const slotChildEnv = "SLIDELIMIT_SLOT_CHILD"

func slotChildRequest() Request { return One("kill", rules.User, "u", conc(3)) }

// slotChild is the child process of TestSlotsKilledHolder: it takes all 3
// slots, says so, and runs (renewing them) until killed.
func slotChild(spec string) int {
	parts := strings.Split(spec, "|")
	lease, err := time.ParseDuration(parts[2])
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	c := redis.NewClient(&redis.Options{Addr: parts[0]})
	e, err := New(c, WithKeyPrefix(parts[1]), WithLease(lease), WithTimeout(5*time.Second))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	for range 3 {
		if d, err := e.Allow(context.Background(), slotChildRequest()); err != nil || !d.Allowed {
			fmt.Fprintln(os.Stderr, "child:", d, err)
			return 2
		}
	}
	fmt.Println("held 3")
	select {}
}

// TestSlotsMerged: in-flight windows of one subject in several checks (or
// one check) share one slot key, the smallest limit holding.
func TestSlotsMerged(t *testing.T) {
	t.Parallel()
	_, c := redistest.StartClient(t)
	prefix := redistest.Prefix(t)
	e := newEngine(t, c, WithKeyPrefix(prefix))
	ctx := context.Background()
	l := rules.Rule{Kind: rules.User, Windows: []rules.Window{conc(3), conc(2)}}
	req := Request{Scope: "m", Checks: []Check{{Rule: l, Subject: "u"}, {Rule: rules.Rule{Kind: rules.User, Windows: []rules.Window{conc(5)}}, Subject: "u"}}}
	for i := range 3 {
		d, err := e.Allow(ctx, req)
		if err != nil || d.Allowed != (i < 2) {
			t.Fatalf("request %d: %+v, %v", i, d, err)
		}
		if i == 2 && (d.Denied.Check != 0 || d.Denied.Window != conc(2)) {
			t.Errorf("denied by %+v; want the 2 concurrent window", d.Denied)
		}
	}
	if keys := scanKeys(t, c, prefix); len(keys) != 1 || !strings.HasSuffix(keys[0], "}:slots") {
		t.Errorf("keys %q; want one slot key", keys)
	}
}

// TestSlotsGrained: an in-flight window beside a grained window (whose
// log is a weighted key with another hash tag) admits and releases as
// beside an exact one.
func TestSlotsGrained(t *testing.T) {
	t.Parallel()
	_, c := redistest.StartClient(t)
	e := newEngine(t, c, WithKeyPrefix(redistest.Prefix(t)))
	ctx := context.Background()
	req := One("g", rules.User, "u", rules.Window{Limit: 100, Period: time.Minute, Grain: time.Second}, conc(2))
	var first Decision
	for i := range 3 {
		d, err := e.Allow(ctx, req)
		if err != nil || d.Allowed != (i < 2) {
			t.Fatalf("request %d: %+v, %v", i, d, err)
		}
		if i == 0 {
			first = d
		}
	}
	if err := e.release(ctx, req, first); err != nil {
		t.Fatal(err)
	}
	d, err := e.Allow(ctx, req)
	if err != nil || !d.Allowed || d.Windows[0].Used != 3 || d.Windows[1].Used != 2 {
		t.Fatalf("after release: %+v, %v; want admitted, 3 in the minute, 2 slots", d, err)
	}
}

// TestSlotsClose: Close stops the renewal goroutine, and Release after
// Close reports ErrClosed.
func TestSlotsClose(t *testing.T) {
	t.Parallel()
	_, c := redistest.StartClient(t)
	e := newEngine(t, c, WithKeyPrefix(redistest.Prefix(t)), WithLease(60*time.Millisecond))
	ctx := context.Background()
	req := One("c", rules.User, "u", conc(1))
	d, err := e.Allow(ctx, req)
	if err != nil || !d.Allowed {
		t.Fatal(d, err)
	}
	done := e.slots.Done()
	e.Close()
	select {
	case <-done:
	default:
		t.Fatal("renewal goroutine still running after Close")
	}
	if err := e.release(ctx, req, d); !errors.Is(err, ErrClosed) {
		t.Errorf("Release after Close: %v, want ErrClosed", err)
	}
}
