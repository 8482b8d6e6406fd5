package throttle

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/slidelimit/slidelimit/engine"
	"github.com/slidelimit/slidelimit/internal/redistest"
)

// TestFlowStateEnds: a waiter with a tenant whose context ends leaves its
// flow's finish tag in the lane's flows hash only until the hash expires,
// within a few leases; calls without a tenant in a throttle without
// shares make no flow state at all.
func TestFlowStateEnds(t *testing.T) {
	mr := miniredis.RunT(t)
	srv := redistest.Start(t)
	for _, b := range []struct {
		name string
		addr string
		ff   func(time.Duration)
	}{{"miniredis", mr.Addr(), mr.FastForward}, {"redis", srv.Addr, nil}} {
		t.Run(b.name, func(t *testing.T) {
			c := redis.NewClient(&redis.Options{Addr: b.addr, ContextTimeoutEnabled: true})
			t.Cleanup(func() { c.Close() })
			lim, err := newLimiter(c, WithEngineOptions(engine.WithKeyPrefix(redistest.Prefix(t))))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { lim.Close() })
			th, err := lim.Throttle("api", "global:1/min")
			if err != nil {
				t.Fatal(err)
			}
			ctx := context.Background()
			p, err := th.Wait(ctx, Call{}) // fills the window
			if err != nil {
				t.Fatal(err)
			}
			p.Finish(nil)
			short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
			defer cancel()
			if _, err := th.Wait(short, Call{}); !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("Wait = %v, want the context's deadline", err)
			}
			flows := th.fleet.keys(th.onlyLane())[5]
			if n := c.Exists(ctx, flows).Val(); n != 0 {
				t.Fatalf("a call without a tenant made flow state %s", flows)
			}
			short, cancel = context.WithTimeout(ctx, 50*time.Millisecond)
			defer cancel()
			if _, err := th.Wait(short, Call{Tenant: "gone"}); !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("Wait = %v, want the context's deadline", err)
			}
			if c.HExists(ctx, flows, "\ngone").Val() != true {
				t.Fatalf("no finish tag of the tenant in %s", flows)
			}
			ttl := c.PTTL(ctx, flows).Val()
			if ttl <= 0 || ttl > 4*fleetLease {
				t.Fatalf("the flows hash expires in %v, want within %v", ttl, 4*fleetLease)
			}
			if b.ff != nil {
				b.ff(4*fleetLease + time.Millisecond)
				if n := c.Exists(ctx, flows).Val(); n != 0 {
					t.Errorf("the flows hash outlived its expiry")
				}
			}
		})
	}
}

// TestTurnTags: the turn script's tags are start-time fair queuing in two
// levels: a flow's inner tags grow by its increment, its fair interval
// over its class's share; a new flow starts at virtual time, after the
// flows of its class ahead; the class's grid spaces its calls by the
// number of its tenants, continued from virtual time when that changes;
// a flow whose finish tag its class's inner time passed is forgotten; a
// call that gave up moves its flow's finish tag back.
func TestTurnTags(t *testing.T) {
	onTagBackends(t, true, turnTags)
}

// onTagBackends runs fn on miniredis, a real server and, with cluster, a
// Cluster, each in a subtest.
func onTagBackends(t *testing.T, cluster bool, fn func(*testing.T, engine.Client)) {
	srv := redistest.Start(t)
	backends := []struct {
		name   string
		client func() engine.Client
	}{
		{"miniredis", func() engine.Client { _, c := redistest.Mini(t); return c }},
		{"redis", func() engine.Client { return srv.Client() }},
	}
	if cluster {
		backends = append(backends, struct {
			name   string
			client func() engine.Client
		}{"cluster", func() engine.Client { return redistest.StartCluster(t).Client(t) }})
	}
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) { fn(t, b.client()) })
	}
}

// tagLane returns a throttle of rules on client and the lane of its calls
// with no key, released when t ends.
func tagLane(t *testing.T, client engine.Client, rules string) (*Throttle, *lane) {
	t.Helper()
	lim, err := newLimiter(client, WithEngineOptions(engine.WithKeyPrefix(redistest.Prefix(t))))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lim.Close() })
	th, err := lim.Throttle("api", rules)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := th.lane(context.Background(), laneKeyOf(t, th, Call{}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { th.release(ln) })
	return th, ln
}

// turnTags is TestTurnTags on client.
func turnTags(t *testing.T, client engine.Client) {
	th, ln := tagLane(t, client, "global:10/s; share(critical):25%")
	ctx := context.Background()
	const step = 1000 // µs
	batch := func(tenant string) *flow { return &flow{field: "\n" + tenant, split: "\n", weight: 75, step: step} }
	critical := &flow{field: "critical\nx", split: "critical\n", weight: 25, step: step}
	tag := func(fl *flow) int64 { return th.fleet.tag(ln, fl, -1).tag }
	v := tag(batch("a"))
	if v < 0 {
		t.Fatal("no tag: the script failed")
	}
	// One tenant of batch: increments of step × 100/75.
	incA := int64(step * 100 / 75)
	if got := tag(batch("a")); got != v+incA {
		t.Errorf("batch a's second tag %d, want %d", got-v, incA)
	}
	// A new flow starts at virtual time: no waiter in the fleet's queue,
	// so the V the last tag read.
	if got := tag(critical); got != v {
		t.Errorf("critical's first tag %d after the first, want 0", got-v)
	}
	if got := tag(critical); got != v+step*100/25 {
		t.Errorf("critical's second tag %d after the first, want %d", got-v, step*100/25)
	}
	// A second tenant of batch splits the class's share: the class's
	// grid doubles its increments from virtual time on, for b and for a's
	// calls tagged already (a at 0 and 2 incA, b one inner µs after each:
	// turns in a fixed order).
	if got := tag(batch("b")); got != v+2 {
		t.Errorf("batch b's first tag %d, want 2", got-v)
	}
	tg := th.fleet.tag(ln, batch("b"), -1)
	if tg.tag != v+2*incA+2 || tg.g.n != 2 || tg.g.a != v || tg.g.x0 != v {
		t.Errorf("batch b's second tag %d on grid %+v, want %d on {a: v, x0: v, n: 2}", tg.tag-v, tg.g, 2*incA+2)
	}
	if a := tg.g.outer(v+incA, incA, 0); a != v+2*incA {
		t.Errorf("batch a's second call remapped to %d, want %d", a-v, 2*incA)
	}
	// A head in the fleet's queue far ahead moves virtual time there:
	// flows behind it are forgotten and start again at it.
	far := v + 1_000_000
	th.fleet.run(ln, "j", far, 0, th.fleet.seq.Add(1))
	if got := tag(batch("a")); got != far {
		t.Errorf("batch a's tag after virtual time passed it: %d, want %d", got-v, far-v)
	}
	if n := client.(redis.Cmdable).HLen(ctx, th.fleet.keys(ln)[5]).Val(); n != 4 {
		t.Errorf("the flows hash holds %d fields, want 4 (virtual time, batch a and the two grids)", n)
	}
	// A flow with credit 2 (a class with a share): its calls are tagged
	// two increments earlier, from two before virtual time, its finish
	// tag growing by one increment per call.
	credited := &flow{field: "critical\ny", split: "critical\n", weight: 25, step: step, credit: 2}
	inc := int64(step * 100 / 25)
	for i, want := range []int64{-2 * inc, -inc, 0, inc, 2 * inc} {
		if got := tag(credited); got != far+want {
			t.Errorf("credited call %d tagged %d after virtual time, want %d", i, got-far, want)
		}
	}
	// A call that gave up (op 'r'): its flow's finish tag goes back by
	// its increment, whichever of the flow's calls it was, so that the
	// flow's next call is tagged one increment earlier; a call not before
	// the finish tag changes nothing.
	tg = th.fleet.tag(ln, credited, -1)
	if tg.tag != far+3*inc || tg.inc != inc || tg.x != far+5*inc {
		t.Fatalf("credited call tagged %d, inner %d, increment %d; want %d, %d, %d",
			tg.tag-far, tg.x-far, tg.inc, 3*inc, 5*inc, inc)
	}
	gaveUp := func(x int64) {
		if err := turnScript.Run(ctx, client.(redis.Cmdable), th.fleet.keys(ln), "r", th.fleet.member, credited.field,
			fleetLease.Microseconds(), th.fleet.channel, ln.id, x, 0, inc).Err(); err != nil {
			t.Fatal(err)
		}
	}
	gaveUp(tg.x - inc) // the call before the last
	if got := tag(credited); got != far+3*inc {
		t.Errorf("after a call gave up, the next is %d, want %d", got-far, 3*inc)
	}
	gaveUp(far + 6*inc) // at the finish tag: nothing
	if got := tag(credited); got != far+4*inc {
		t.Errorf("after a call not before the finish tag gave up, the next is %d, want %d", got-far, 4*inc)
	}
	// A call admitted at once (op 'a'): it spends its flow's next turn,
	// the finish tag moving on by an increment, and the fleet is told to
	// move the flow's waiters later; a flow with no finish tag ahead is
	// tagged, so its next call comes a turn later too.
	sub := client.(redis.UniversalClient).Subscribe(ctx, th.fleet.channel)
	defer sub.Close()
	if _, err := sub.Receive(ctx); err != nil {
		t.Fatal(err)
	}
	charged := func(fl *flow) {
		if err := turnScript.Run(ctx, client.(redis.Cmdable), th.fleet.keys(ln), "a", th.fleet.member, fl.field,
			fleetLease.Microseconds(), th.fleet.channel, ln.id, fl.step*100, fl.weight, fl.split, fl.credit).Err(); err != nil {
			t.Fatal(err)
		}
	}
	charged(credited)
	if got := tag(credited); got != far+6*inc {
		t.Errorf("after a call admitted at once, the next is %d, want %d", got-far, 6*inc)
	}
	// Other messages (a grid's) may come first.
	got := ""
	for !strings.HasPrefix(got, "a|") {
		msg, err := sub.ReceiveMessage(ctx)
		if err != nil {
			t.Fatal(err)
		}
		got = msg.Payload
	}
	prefix, suffix := fmt.Sprintf("a|%s|%s|%d|", ln.id, th.fleet.member, inc), "|"+credited.field
	if at, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimPrefix(got, prefix), suffix), 10, 64); err != nil || at < v {
		t.Errorf("message %q, want %q, the script's time, %q", got, prefix, suffix)
	}
	fresh := &flow{field: "critical\nz", split: "critical\n", weight: 25, step: step, credit: 2}
	flows := th.fleet.keys(ln)[5]
	if client.(redis.Cmdable).HExists(ctx, flows, fresh.field).Val() {
		t.Fatalf("flow %q has a finish tag before its first call", fresh.field)
	}
	charged(fresh)
	f, err := client.(redis.Cmdable).HGet(ctx, flows, fresh.field).Int64()
	if err != nil || f < far+inc {
		t.Fatalf("a new flow charged at once: finish tag %d (%v), want at least %d", f-far, err, inc)
	}
	if tg = th.fleet.tag(ln, fresh, -1); tg.x != f || tg.inc != inc {
		t.Errorf("the charged flow's next call: inner tag %d, increment %d; want %d, %d", tg.x-far, tg.inc, f-far, inc)
	}
}

// TestHandBack: a message h (a call gave up, in this process or another)
// moves the waiters of its flow tagged after its tag back by its
// increment; other flows keep theirs, and the queue stays in tag order.
// Only waiters tagged before the message's script time move, and a
// waiter tagged before it but queued after moves when it is queued. A
// message a (a call of the flow admitted at once) moves them later.
func TestHandBack(t *testing.T) {
	a, b := &flow{field: "\na"}, &flow{field: "\nb"}
	w := func(fl *flow, tag, inc int64) *waiter {
		return &waiter{fl: fl, stamp: tag, x: tag, inc: inc, tagged: true, seen: 100, wake: make(chan struct{}, 1)}
	}
	th := &Throttle{}
	f := &fleet{t: th, member: "me"}
	th.fleet = f
	h := func(ln *lane, x, inc, at int64, field string) {
		f.message(ln, []string{"h", "1", "other", fmt.Sprint(x), fmt.Sprint(inc), fmt.Sprint(at), field})
	}
	// a1 (tag 10) gave up and is gone: a2 and a3 move back by 10.
	b1, a2, b2, a3 := w(b, 15, 10), w(a, 20, 10), w(b, 25, 10), w(a, 30, 7)
	ln := &lane{t: th, q: []*waiter{b1, a2, b2, a3}}
	h(ln, 10, 10, 200, "\na")
	if a2.stamp != 10 || a2.x != 10 || a3.stamp != 20 || a3.inc != 7 || b1.stamp != 15 || b2.stamp != 25 {
		t.Errorf("tags a2 %d, a3 %d, b1 %d, b2 %d; want 10, 20, 15, 25", a2.stamp, a3.stamp, b1.stamp, b2.stamp)
	}
	if ln.q[0] != a2 || ln.q[1] != b1 || ln.q[2] != a3 {
		t.Errorf("queue not in tag order")
	}
	// The same message again (a replay) and an older one move nothing.
	h(ln, 10, 10, 200, "\na")
	h(ln, 0, 10, 150, "\na")
	if a2.stamp != 10 || a3.stamp != 20 {
		t.Errorf("a replayed or older message moved a2 to %d, a3 to %d", a2.stamp, a3.stamp)
	}
	// This process's own message counts as well (its give-up moved
	// nothing here), and a waiter tagged after the message's script time
	// (its tag already counts the give-up) does not move.
	late := w(a, 40, 10)
	late.seen = 400
	ln.queue(late)
	f.message(ln, []string{"h", "1", "me", "5", "10", "300", "\na"})
	if a2.stamp != 0 || a3.stamp != 10 || late.stamp != 40 {
		t.Errorf("after this process's message: a2 %d, a3 %d, late %d; want 0, 10, 40", a2.stamp, a3.stamp, late.stamp)
	}
	// The head asking keeps its place, though a waiter of the flow takes a
	// tag before it.
	hd, y := w(b, 8, 10), w(a, 20, 10)
	ln = &lane{t: th, q: []*waiter{hd, y}, asking: true}
	h(ln, 5, 15, 200, "\na")
	if ln.q[0] != hd || y.stamp != 5 {
		t.Errorf("head moved %v, y tagged %d; want no move, 5", ln.q[0] != hd, y.stamp)
	}
	// A waiter tagged before a message and queued after it (its tag's
	// reply came back late) moves when it is queued; one tagged after it
	// does not.
	ln = &lane{t: th}
	h(ln, 10, 10, 200, "\na")
	early, after := w(a, 30, 10), w(a, 50, 10)
	after.seen = 250
	ln.queue(early)
	ln.queue(after)
	if early.stamp != 20 || after.stamp != 50 {
		t.Errorf("queued after the message: early %d, after %d; want 20, 50", early.stamp, after.stamp)
	}
	// Message a: a call of flow a was admitted at once: the flow's waiters
	// move later by the increment, past b.
	p, q := w(a, 10, 10), w(b, 12, 10)
	ln = &lane{t: th, q: []*waiter{p, q}}
	f.message(ln, []string{"a", "1", "me", "7", "300", "\na"})
	if p.stamp != 17 || p.x != 17 || ln.q[0] != q || ln.q[1] != p {
		t.Errorf("after message a: a at %d (inner %d), first %v; want 17, 17, b first", p.stamp, p.x, ln.q[0] == q)
	}
	// A lane keeps the shifts it heard of for shiftKeep, at most shiftCap.
	ln = &lane{t: th}
	for i := range shiftCap + 10 {
		ln.shifted(shift{field: "\na", inc: 1, at: int64(i + 1), heard: time.Now()})
	}
	if len(ln.shifts) != shiftCap || ln.shifts[len(ln.shifts)-1].at != shiftCap+10 {
		t.Errorf("%d shifts kept, the last at %d; want %d, %d", len(ln.shifts), ln.shifts[len(ln.shifts)-1].at, shiftCap, shiftCap+10)
	}
	ln.shifted(shift{field: "\na", inc: 1, at: 1 << 40, heard: time.Now().Add(shiftKeep)})
	if len(ln.shifts) != 1 {
		t.Errorf("%d shifts kept after shiftKeep, want 1", len(ln.shifts))
	}
}

// TestRegrid: a class's new grid remaps its queued waiters, calls of a
// tenant tagged while it waited alone moving apart, and keeps the queue in
// tag order; other classes' waiters and older grids change nothing.
func TestRegrid(t *testing.T) {
	a := &flow{field: "\na", split: "\n"}
	b := &flow{field: "\nb", split: "\n"}
	c := &flow{field: "c\nx", split: "c\n"}
	const inc = 100
	w := func(fl *flow, x int64) *waiter {
		return &waiter{fl: fl, stamp: x, x: x, inc: inc, tagged: true, wake: make(chan struct{}, 1)}
	}
	// a's three calls tagged alone (n 1, identity at 1000), b's first
	// since, c's call between.
	a1, a2, a3, b1, c1 := w(a, 1000), w(a, 1100), w(a, 1200), w(b, 1001), w(c, 1150)
	ln := &lane{q: []*waiter{a1, b1, a2, c1, a3}}
	ln.regrid("\n", grid{a: 1000, x0: 1000, n: 1, epoch: 5})
	ln.regrid("\n", grid{a: 1000, x0: 1000, n: 2, epoch: 6})
	want := []*waiter{a1, b1, c1, a2, a3}
	for i, x := range want {
		if ln.q[i] != x {
			t.Fatalf("queue %d: stamp %d, want %d", i, ln.q[i].stamp, x.stamp)
		}
	}
	if a2.stamp != 1200 || a3.stamp != 1400 || b1.stamp != 1002 || c1.stamp != 1150 {
		t.Errorf("stamps a2 %d, a3 %d, b1 %d, c1 %d; want 1200, 1400, 1002, 1150", a2.stamp, a3.stamp, b1.stamp, c1.stamp)
	}
	// An older epoch is ignored.
	ln.regrid("\n", grid{a: 1000, x0: 1000, n: 3, epoch: 4})
	if a3.stamp != 1400 {
		t.Errorf("an older grid remapped a3 to %d", a3.stamp)
	}
	// A waiter tagged on an older grid, queued after a newer one came
	// (between its tag and its queueing), takes the lane's grid.
	late := w(a, 1300)
	ln.queue(late)
	if late.stamp != 1600 || ln.q[len(ln.q)-1] != late {
		t.Errorf("a waiter tagged on an older grid queued at %d, want 1600, last", late.stamp)
	}
	// A credit moves the class's calls back by credit increments, whatever
	// the grid's n: the class leads its share by that many calls.
	if got := (grid{a: 1000, x0: 1000, n: 2}).outer(1100, inc, 2); got != 1000 {
		t.Errorf("outer with credit 2 on n 2: %d, want 1000", got)
	}
	if got := (grid{a: 1000, x0: 1000, n: 3}).outer(1100, inc, 2); got != 1100 {
		t.Errorf("outer with credit 2 on n 3: %d, want 1100", got)
	}
}

// TestInOrder: a waiter whose tag came back after that of a later caller
// of its flow (its script call waited for a connection) trades tags with
// it, each with its increment, so that the flow keeps its arrival order;
// other flows keep theirs.
func TestInOrder(t *testing.T) {
	a, b := &flow{field: "\na"}, &flow{field: "\nb"}
	w := func(fl *flow, arrived, x, inc int64) *waiter {
		return &waiter{fl: fl, arrived: arrived, stamp: x, x: x, inc: inc, tagged: true, wake: make(chan struct{}, 1)}
	}
	a2, b1, a3 := w(a, 20, 100, 10), w(b, 5, 105, 10), w(a, 30, 110, 7)
	ln := &lane{q: []*waiter{a2, b1, a3}}
	late := w(a, 10, 120, 5) // arrived first, tagged last
	if !ln.inOrder(late) {
		t.Error("the head's tag changed, unreported")
	}
	if late.x != 100 || late.inc != 10 || a2.x != 110 || a2.inc != 7 || a3.x != 120 || a3.inc != 5 {
		t.Errorf("tags late %d/%d, a2 %d/%d, a3 %d/%d; want 100/10, 110/7, 120/5",
			late.x, late.inc, a2.x, a2.inc, a3.x, a3.inc)
	}
	if ln.q[0] != b1 || ln.q[1] != a2 || ln.q[2] != a3 || b1.x != 105 {
		t.Error("queue not in tag order, or b's tag moved")
	}
	// In order already: nothing moves.
	next := w(a, 40, 130, 5)
	if ln.inOrder(next) || next.x != 130 {
		t.Errorf("a waiter tagged in order moved to %d", next.x)
	}
}

// TestTagFromServed: a flow new to its class starts no earlier than the
// highest tag of its class the tagging process admitted (lane.served), level with the
// calls just served, one turn ahead of the flows that wait, and not
// behind them, where it would take several turns in a row while their
// waiters wait. Fault seed 8886060580830229538 on miniredis found it: a
// class's credited waiters kept the lowest score in the fleet's queue,
// and so virtual time, two increments behind what the shareless class
// was being served at. A flow with a finish tag keeps it.
func TestTagFromServed(t *testing.T) {
	onTagBackends(t, false, tagFromServed)
}

func tagFromServed(t *testing.T, client engine.Client) {
	th, ln := tagLane(t, client, "global:10/s")
	const step = 1000 // µs
	tenant := func(name string) *flow { return &flow{field: "\n" + name, weight: 100, step: step} }
	tag := func(fl *flow) int64 { return th.fleet.tag(ln, fl, -1).tag }
	const inc = step
	// Tenants a and b each get three calls tagged, v to v + 2 inc; the
	// first two of each are admitted here.
	v := tag(tenant("a"))
	if v < 0 {
		t.Fatal("no tag: the script failed")
	}
	for _, want := range []int64{0, inc, 2 * inc} {
		if want > 0 {
			if got := tag(tenant("a")); got != v+want {
				t.Fatalf("a's tag %d, want %d", got-v, want)
			}
		}
		if got := tag(tenant("b")); got != v+want {
			t.Fatalf("b's tag %d, want %d", got-v, want)
		}
	}
	ln.mu.Lock()
	ln.served = map[string]int64{"": v + inc}
	ln.mu.Unlock()
	// A new tenant starts level with the last call served, before a's and
	// b's waiters at v + 2 inc; its second call comes after theirs.
	if got := tag(tenant("c")); got != v+inc {
		t.Errorf("new tenant c's first tag %d, want %d (the served tag)", got-v, inc)
	}
	if got := tag(tenant("c")); got != v+2*inc {
		t.Errorf("c's second tag %d, want %d", got-v, 2*inc)
	}
	// A flow with a finish tag keeps it, behind the served tag: b's next
	// call comes at v + 3 inc whatever was served.
	ln.mu.Lock()
	ln.served = map[string]int64{"": v + 5*inc}
	ln.mu.Unlock()
	if got := tag(tenant("b")); got != v+3*inc {
		t.Errorf("b's fourth tag %d after a later served tag, want %d", got-v, 3*inc)
	}
	// An older served tag changes nothing: a new flow starts at virtual
	// time.
	ln.mu.Lock()
	ln.served = map[string]int64{"": v - inc}
	ln.mu.Unlock()
	if got := tag(tenant("d")); got != v {
		t.Errorf("new tenant d's first tag %d after an older served tag, want 0", got-v)
	}
	// Only its own class's served tag moves a new flow: another class's
	// tags run on another grid (a credited class's below virtual time).
	ln.mu.Lock()
	ln.served = map[string]int64{"other\n": v + 10*inc}
	ln.mu.Unlock()
	if got := tag(tenant("e")); got != v {
		t.Errorf("new tenant e's first tag %d after another class's served tag, want 0", got-v)
	}
}

// TestUntagMoved: calls of one flow that give up at once, each sending
// the tag it held before it heard of the other's give-up, leave the flow's
// later calls one increment apart, as if neither had been tagged: op 'r'
// moves a call's tag by the flow's moves made after the last one its
// process applied to it (a give-up, or a call admitted at once) before it
// makes its own. Before, the later calls ended on one tag, and the
// tenant was admitted twice in a row (the fault harness's
// redis-7222964207587113098 under load).
func TestUntagMoved(t *testing.T) {
	onTagBackends(t, false, untagMoved)
}

func untagMoved(t *testing.T, client engine.Client) {
	th, ln := tagLane(t, client, "global:10/s")
	ctx := context.Background()
	const inc = 1000 // µs: step 1000 at a weight of 100%
	fl := &flow{field: "\na", weight: 100, step: inc}
	sub := client.(redis.UniversalClient).Subscribe(ctx, th.fleet.channel)
	defer sub.Close()
	if _, err := sub.Receive(ctx); err != nil {
		t.Fatal(err)
	}
	// moves returns the next n messages h and a of the flow, as a
	// process hears them.
	moves := func(n int) [][]string {
		var out [][]string
		for len(out) < n {
			rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			msg, err := sub.ReceiveMessage(rctx)
			cancel()
			if err != nil {
				t.Fatalf("waiting for %d moves, got %d: %v", n, len(out), err)
			}
			if parts := strings.Split(msg.Payload, "|"); parts[0] == "h" || parts[0] == "a" {
				out = append(out, parts)
			}
		}
		return out
	}
	var tags []tagging
	for range 5 {
		tags = append(tags, th.fleet.tag(ln, fl, -1))
	}
	v := tags[0].x
	for i, tg := range tags {
		if tg.x != v+int64(i)*inc || tg.inc != inc {
			t.Fatalf("call %d: inner tag %d, increment %d; want %d, %d", i, tg.x-v, tg.inc, i*inc, inc)
		}
	}
	// Elsewhere in the fleet, calls 3 and 4 wait.
	w3 := &waiter{fl: fl, x: tags[3].x, stamp: tags[3].tag, inc: inc, tagged: true, seen: tags[3].at, wake: make(chan struct{}, 1)}
	w4 := &waiter{fl: fl, x: tags[4].x, stamp: tags[4].tag, inc: inc, tagged: true, seen: tags[4].at, wake: make(chan struct{}, 1)}
	other := &lane{t: th, q: []*waiter{w3, w4}}
	gaveUp := func(tg tagging) {
		if err := turnScript.Run(ctx, client.(redis.Cmdable), th.fleet.keys(ln), "r", th.fleet.member, fl.field,
			fleetLease.Microseconds(), th.fleet.channel, ln.id, tg.x, 0, tg.inc, tg.at).Err(); err != nil {
			t.Fatal(err)
		}
	}
	// Calls 1 and 2 give up at once, each with the tag it was given.
	gaveUp(tags[1])
	gaveUp(tags[2])
	ms := moves(2)
	var last int64
	for i, parts := range ms {
		if x := msgNum(parts, 3); x != v+inc {
			t.Errorf("give-up %d: message h at inner tag %d, want %d (call 2's moved by call 1's)", i+1, x-v, inc)
		}
		if at := msgNum(parts, 5); at <= last {
			t.Errorf("give-up %d: message h at %d, not after the last move at %d", i+1, at, last)
		} else {
			last = at
		}
		th.fleet.message(other, parts)
	}
	if w3.x != v+inc || w4.x != v+2*inc {
		t.Errorf("after calls 1 and 2 gave up, calls 3 and 4 at %d and %d; want %d and %d", w3.x-v, w4.x-v, inc, 2*inc)
	}
	if tg := th.fleet.tag(ln, fl, -1); tg.x != v+3*inc {
		t.Errorf("the flow's next call at %d, want %d", tg.x-v, 3*inc)
	} else {
		tags = append(tags, tg) // call 5
	}
	// A call admitted at once (op 'a') moves the flow's waiters later;
	// call 4, which gives up before its process heard of it, leaves its
	// place where the move put it.
	if err := turnScript.Run(ctx, client.(redis.Cmdable), th.fleet.keys(ln), "a", th.fleet.member, fl.field,
		fleetLease.Microseconds(), th.fleet.channel, ln.id, fl.step*100, fl.weight, fl.split, fl.credit).Err(); err != nil {
		t.Fatal(err)
	}
	gaveUp(tagging{x: w4.x, inc: inc, at: w4.seen})
	ms = moves(2)
	if ms[0][0] != "a" || ms[1][0] != "h" || msgNum(ms[1], 3) != v+3*inc {
		t.Errorf("messages %q, %q; want a, then h at inner tag %d", strings.Join(ms[0], "|"), strings.Join(ms[1], "|"), 3*inc)
	}
	other.q = []*waiter{w3}
	for _, parts := range ms {
		th.fleet.message(other, parts)
	}
	if w3.x != v+2*inc {
		t.Errorf("call 3 at %d after the charge, want %d", w3.x-v, 2*inc)
	}
	if tg := th.fleet.tag(ln, fl, -1); tg.x != v+4*inc {
		t.Errorf("the flow's next call at %d, want %d (calls 3 and 5 wait, and the charged one)", tg.x-v, 4*inc)
	}
}
