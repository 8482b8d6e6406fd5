package engine

import (
	"context"
	"testing"
	"time"

	"github.com/slidelimit/slidelimit/rules"
)

// TestDistinctGiveBackShared: a count: give-back leaves a distinct value
// counted (docs/limits.md), since another admitted request may share it.
// Found by TestFaults (miniredis and redis, seed 3): the give-back
// restored the value (removed it), so the request sharing it held a value
// the window no longer counted, and a new value was admitted beside it: two
// values in a window of one.
func TestDistinctGiveBackShared(t *testing.T) {
	t.Parallel()
	_, _, e := miniEngine(t, rules.FailClosed)
	ctx := context.Background()
	r := func(v string) Request {
		c := user("u", win(1, 10*time.Second))
		c.Distinct = v
		return req(c)
	}
	first := mustAllow(t, e, r("a"), true)
	mustAllow(t, e, r("a"), true) // shares a: counts nothing anew
	if err := e.Finish(ctx, first, Outcome{GiveBack: true}); err != nil {
		t.Fatal(err)
	}
	mustAllow(t, e, r("b"), false) // a is still held by the second request
}
