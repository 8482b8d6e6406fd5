package engine

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/slidelimit/slidelimit/internal/redistest"
	"github.com/slidelimit/slidelimit/rules"
)

// cannedScript answers every script call with an admission of its one
// op in one key of two windows, without the network: the engine's own
// work per decision is then all that is measured.
type cannedScript struct{}

func (cannedScript) DialHook(next redis.DialHook) redis.DialHook { return next }

func (cannedScript) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

func (cannedScript) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		switch strings.ToLower(cmd.Name()) {
		case "fcall", "evalsha", "eval":
			if c, ok := cmd.(*redis.IntSliceCmd); ok {
				c.SetVal([]int64{1_790_000_000, 123_456, 1, 5, 1_789_999_999_000_000, 2, 1_790_000_000_000_000})
				return nil
			}
		}
		return next(ctx, cmd)
	}
}

// BenchmarkAllowClient measures the engine's client-side work per
// admission (planning, arguments, the reply, the known-answer cache, the
// Decision) with script calls answered in process: the CPU a decision
// costs the caller beyond go-redis and the network.
//
//	go test -run XXX -bench AllowClient -benchmem ./engine
func BenchmarkAllowClient(b *testing.B) {
	s := redistest.Start(b)
	rc := s.Client()
	rc.AddHook(cannedScript{})
	e := newEngine(b, rc, WithKeyPrefix(redistest.Prefix(b)))
	lim := rules.Rule{Kind: rules.Key, Name: "bench", Windows: []rules.Window{win(1e9, time.Second), win(1e9, time.Minute)}}
	req := Request{Scope: "bench", Checks: []Check{{Rule: lim}}, Fail: rules.FailClosed}
	subjects := make([]string, 10_000)
	for i := range subjects {
		subjects[i] = strconv.Itoa(i)
	}
	ctx := context.Background()
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		req.Checks[0].Subject = subjects[i%len(subjects)]
		d, err := e.Allow(ctx, req)
		if err != nil || !d.Allowed || d.Source != "redis" {
			b.Fatal(err, d.Source)
		}
	}
}
