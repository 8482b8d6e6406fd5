package engine

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/slidelimit/slidelimit/internal/redistest"
	"github.com/slidelimit/slidelimit/rules"
)

func BenchmarkStats(b *testing.B) {
	s := redistest.Start(b)
	rc := s.Client()
	e := newEngine(b, rc, WithPrefix(testPrefix(b)))
	rc.ConfigResetStat(context.Background())
	benchAllow(b, e, []rules.Window{win(100_000, 100*ms), win(1_000_000, time.Second)}, 10000, 64)
	info, _ := rc.Info(context.Background(), "commandstats", "cpu").Result()
	if b.N > 1000 {
		os.WriteFile("/tmp/stats.txt", []byte(info), 0o644)
	}
}
