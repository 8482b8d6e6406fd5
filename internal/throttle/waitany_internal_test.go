package throttle

import (
	"context"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/slidelimit/slidelimit/engine"
)

// TestPermitCancelGivesBack: a call WaitAny admitted in a race and did
// not choose leaves every window, its slot and its count, and its lane
// has no user left; cancelling it again, or finishing it, does nothing.
func TestPermitCancelGivesBack(t *testing.T) {
	mr := miniredis.RunT(t)
	client := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	t.Cleanup(func() { client.Close() })
	lim, err := newLimiter(client, WithEngineOptions(engine.WithKeyPrefix("cancel:")))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lim.Close() })
	th, err := lim.Throttle("api", "key(k):1 concurrent; key(k):100/min")
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	c := Call{Keys: map[string]string{"k": "a"}}
	req, err := th.Request(ctx, c)
	if err != nil {
		t.Fatal(err)
	}
	used := func() (total int64) {
		d, err := lim.eng.Peek(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		for _, ws := range d.Windows {
			total += ws.Used
		}
		return total
	}
	p, err := th.Wait(ctx, c)
	if err != nil {
		t.Fatal(err)
	}
	if n := used(); n != 2 {
		t.Fatalf("the windows hold %d after Wait, want 2 (a slot and a count)", n)
	}
	p.cancel()
	if n := used(); n != 0 {
		t.Errorf("the windows hold %d after cancel, want 0", n)
	}
	th.mu.Lock()
	users := p.lane.ref.users
	th.mu.Unlock()
	if users != 0 {
		t.Errorf("the lane has %d users after cancel, want 0", users)
	}
	p.cancel()
	if p.Finish(nil) {
		t.Error("Finish after cancel finished the permit again")
	}
	wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if p, err := th.Wait(wctx, c); err != nil || used() != 2 {
		t.Errorf("Wait after cancel = %v, windows hold %d; want admitted, 2", err, used())
	} else {
		p.Finish(nil)
	}
}
