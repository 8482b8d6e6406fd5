package engine

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/slidelimit/slidelimit/internal/redistest"
)

// forceIDs makes e produce the ids first, first+1, ...: two engines given
// the same sequence behave like two processes on the same snowflake node
// admitting within the same millisecond.
func forceIDs(e *Engine, first int64) {
	n := first - 1
	e.newID = func() int64 { n++; return n }
}

// collidingPair returns two engines on c with the same snowflake node, a
// shared fake clock and both producing the ids 1001, 1002, ...: processes
// whose members collide.
func collidingPair(t *testing.T, c Client, prefix string) (a, b *Engine) {
	clk := redistest.NewClock()
	a = newEngine(t, c, WithKeyPrefix(prefix), WithClock(clk.Now), WithNode(7))
	b = newEngine(t, c, WithKeyPrefix(prefix), WithClock(clk.Now), WithNode(7))
	forceIDs(a, 1001)
	forceIDs(b, 1001)
	return a, b
}

func members(t *testing.T, rc redis.Cmdable, key string) []string {
	t.Helper()
	ms, err := rc.ZRangeByScore(context.Background(), key, &redis.ZRangeBy{Min: "0", Max: "+inf"}).Result()
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(ms)
	return ms
}

func TestMemberCollision(t *testing.T) {
	t.Parallel()
	_, rc := redistest.StartClient(t)
	prefix := redistest.Prefix(t)
	afterTTLs(t, rc, prefix)
	a, b := collidingPair(t, rc, prefix)
	ws := win(10, time.Minute)
	u, ip1, ip9 := user("u", ws), ip("1.1.1.1", ws), ip("9.9.9.9", ws)

	mustAllow(t, a, req(u, ip1), true) // 1001
	d := mustAllow(t, b, req(u, ip1), true)
	if d.Windows[0].Used != 2 || d.Windows[1].Used != 2 {
		t.Errorf("after a collision: used %d %d, want 2 2", d.Windows[0].Used, d.Windows[1].Used)
	}
	for _, c := range []Check{u, ip1} {
		if got, want := members(t, rc, a.keyOf("s", c)), []string{"1001", "1001.1"}; !slices.Equal(got, want) {
			t.Errorf("%s: members %v, want %v", c.Subject, got, want)
		}
	}

	// A collision on the second key only: the first attempt's member must
	// leave the first key.
	mustAllow(t, a, req(ip1), true)      // 1002
	mustAllow(t, b, req(ip9, ip1), true) // 1002 clashes in ip1 only
	if got, want := members(t, rc, a.keyOf("s", ip9)), []string{"1002.1"}; !slices.Equal(got, want) {
		t.Errorf("9.9.9.9: members %v, want %v", got, want)
	}
	if got, want := members(t, rc, a.keyOf("s", ip1)), []string{"1001", "1001.1", "1002", "1002.1"}; !slices.Equal(got, want) {
		t.Errorf("1.1.1.1: members %v, want %v", got, want)
	}
	// A suffixed member can collide too.
	forceIDs(a, 1001)
	d = mustAllow(t, a, req(u), true)
	if got, want := members(t, rc, a.keyOf("s", u)), []string{"1001", "1001.1", "1001.2"}; !slices.Equal(got, want) || d.Windows[0].Used != 3 {
		t.Errorf("u: members %v used %d, want %v 3", got, d.Windows[0].Used, want)
	}

	// Giving back a suffixed request removes its own member, never the
	// request it collided with.
	if err := a.giveBack(context.Background(), req(u), d); err != nil {
		t.Fatal(err)
	}
	if got, want := members(t, rc, a.keyOf("s", u)), []string{"1001", "1001.1"}; !slices.Equal(got, want) {
		t.Errorf("u after giving back 1001.2: members %v, want %v", got, want)
	}
	forceIDs(b, 1003)
	d = mustAllow(t, b, req(ip9, ip1), true) // 1003, no collision
	if err := b.giveBack(context.Background(), req(ip9, ip1), d); err != nil {
		t.Fatal(err)
	}
	if got, want := members(t, rc, a.keyOf("s", ip1)), []string{"1001", "1001.1", "1002", "1002.1"}; !slices.Equal(got, want) {
		t.Errorf("1.1.1.1 after giving back 1003: members %v, want %v", got, want)
	}
}

// clusterRollback checks on a cluster that a request denied in one slot
// leaves nothing in the slots that admitted it, including when its member
// had to be suffixed after a collision there.
func clusterRollback(t *testing.T, cl *redistest.Cluster) {
	cc := cl.Client(t)
	prefix := redistest.Prefix(t)
	afterClusterTTLs(t, cl, prefix)
	a, b := collidingPair(t, cc, prefix)
	ipA := ip("10.0.0.1", win(10, time.Minute))
	userB := user("b", win(10, time.Minute))
	userC := user("c", win(1, time.Minute))
	g := global(win(10, time.Minute))
	keys := []string{a.keyOf("s", ipA), a.keyOf("s", userB), a.keyOf("s", userC), a.keyOf("s", g)}
	if slot(keys[0]) == slot(keys[2]) {
		t.Fatal("test keys share a slot")
	}

	mustAllow(t, a, req(ipA, userB), true) // 1001 in ipA, userB
	mustAllow(t, a, req(userC), true)      // 1002 fills userC
	// b's 1001 clashes in ipA (admitted there as 1001.1) and is denied by
	// userC: the rollback must remove 1001.1, not a's 1001.
	d, err := b.Allow(context.Background(), req(ipA, g, userC))
	if err != nil || d.Allowed || d.Source != "redis" {
		t.Fatalf("denied request: %+v %v", d, err)
	}
	if d.Denied == (WindowState{}) || d.Denied.Check != 2 || d.RetryAfter != time.Minute {
		t.Errorf("denied by %+v after %v, want check 2 after 1m", d.Denied, d.RetryAfter)
	}
	if d.Windows[0].Used != 1 || d.Windows[1].Used != 0 {
		t.Errorf("rolled-back windows report used %d %d, want 1 0", d.Windows[0].Used, d.Windows[1].Used)
	}
	want := map[string][]string{keys[0]: {"1001"}, keys[1]: {"1001"}, keys[2]: {"1002"}, keys[3]: nil}
	for k, w := range want {
		if got := members(t, cc, k); !slices.Equal(got, w) {
			t.Errorf("%s: members %v, want %v", k, got, w)
		}
	}
}

// clusterGiveBack checks on a cluster a give-back whose member got a
// suffix in one slot (a collision there) and none in another: each slot
// loses exactly the request's own member.
func clusterGiveBack(t *testing.T, cl *redistest.Cluster) {
	cc := cl.Client(t)
	prefix := redistest.Prefix(t)
	afterClusterTTLs(t, cl, prefix)
	a, b := collidingPair(t, cc, prefix)
	ws := win(10, time.Minute)
	u, ip1 := user("u", ws), ip("10.0.0.1", ws)
	ku, kip := a.keyOf("s", u), a.keyOf("s", ip1)
	if slot(ku) == slot(kip) {
		t.Fatal("test keys share a slot")
	}
	mustAllow(t, a, req(u), true) // 1001 in u
	r := req(u, ip1)
	d := mustAllow(t, b, r, true) // 1001.1 in u, 1001 in ip1
	if ks := d.admitted.Keys; len(ks) != 2 || ks[0].Suffix == ks[1].Suffix {
		t.Fatalf("taken keys %+v, want two with different suffixes (slots differ)", ks)
	}
	if err := b.giveBack(context.Background(), r, d); err != nil {
		t.Fatal(err)
	}
	if got, want := members(t, cc, ku), []string{"1001"}; !slices.Equal(got, want) {
		t.Errorf("u: members %v, want %v (a's entry stays)", got, want)
	}
	if got := members(t, cc, kip); len(got) != 0 {
		t.Errorf("10.0.0.1: members %v, want none", got)
	}
}
