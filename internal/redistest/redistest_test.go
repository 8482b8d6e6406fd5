package redistest_test

import (
	"context"
	"sync/atomic"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/slidelimit/slidelimit/internal/redistest"
)

func TestStartAndRestart(t *testing.T) {
	t.Parallel()
	s := redistest.Start(t)
	c := s.Client()
	ctx := context.Background()
	if err := c.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	s.Kill()
	if err := c.Ping(ctx).Err(); err == nil {
		t.Fatal("ping after Kill succeeded")
	}
	s.Restart()
	if n, err := c.Exists(ctx, "k").Result(); err != nil || n != 0 {
		t.Fatalf("after restart: exists=%d err=%v, want 0 <nil>", n, err)
	}
}

func TestCluster(t *testing.T) {
	t.Parallel()
	cl := redistest.StartCluster(t)
	c := cl.Client(t)
	ctx := context.Background()
	for _, k := range []string{"a", "b", "c", "d", "e"} {
		if err := c.Set(ctx, k, "v", 0).Err(); err != nil {
			t.Fatal(err)
		}
	}
	var masters atomic.Int32
	err := c.ForEachMaster(ctx, func(ctx context.Context, m *redis.Client) error { masters.Add(1); return nil })
	if err != nil || masters.Load() != 3 {
		t.Fatalf("masters=%d err=%v, want 3", masters.Load(), err)
	}
}
