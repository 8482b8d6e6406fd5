package engine

import (
	"context"
	"testing"
	"time"

	"github.com/slidelimit/slidelimit/rules"
)

func conc(n int64) rules.Window { return rules.Window{Limit: n, Concurrent: true} }

func TestSlotsSmoke(t *testing.T) {
	t.Parallel()
	_, c := startRedis(t)
	prefix := testPrefix(t)
	e := newEngine(t, c, WithPrefix(prefix))
	ctx := context.Background()
	req := One("s", rules.User, "42", win(10, time.Minute), conc(2))
	var ds []Decision
	for i := 0; i < 4; i++ {
		d, err := e.Allow(ctx, req)
		t.Logf("%d: %+v %v", i, d, err)
		ds = append(ds, d)
	}
	if err := e.Release(ctx, req, ds[0]); err != nil {
		t.Fatal(err)
	}
	d, err := e.Allow(ctx, req)
	t.Logf("after release: %+v %v", d, err)
	keys := scanKeys(t, c, prefix)
	for _, k := range keys {
		t.Log(k, c.ZRangeWithScores(ctx, k, 0, -1).Val(), c.PTTL(ctx, k).Val())
	}
}
