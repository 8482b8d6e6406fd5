package replay

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/slidelimit/slidelimit/engine"
)

// script decides every request with the engine and its script, on an
// embedded miniredis or a Redis server, at the log's time (engine.WithClock).
// It is exact by construction and slow (a script call per request, and a
// give-back per request count: does not count); the replay uses it for
// windows with a grain, which local does not model, and on request
// (-engine script), and the differential test holds local to it.
type script struct {
	eng    *engine.Engine
	client *redis.Client
	mini   *miniredis.Miniredis // nil on a real Redis
	now    atomic.Int64         // the log time of the request deciding, µs: the engine's clock
	miniAt int64                // the log time miniredis's clock was last moved to, µs
}

// newScript connects to the Redis at url, or embeds a miniredis when url is
// empty. Keys go under a random prefix and expire on their own.
func newScript(url string) (*script, error) {
	s := &script{}
	if url == "" {
		m, err := miniredis.Run()
		if err != nil {
			return nil, fmt.Errorf("replay: embedded miniredis: %w", err)
		}
		s.mini = m
		s.client = redis.NewClient(&redis.Options{Addr: m.Addr()})
	} else {
		o, err := redis.ParseURL(url)
		if err != nil {
			return nil, fmt.Errorf("replay: -redis: %w", err)
		}
		s.client = redis.NewClient(o)
	}
	var b [6]byte
	_, _ = rand.Read(b[:])
	e, err := engine.New(s.client,
		// The engine reads its clock from background goroutines too.
		engine.WithClock(func() time.Time { return time.UnixMicro(s.now.Load()) }),
		engine.WithKeyPrefix("slidelimit-replay:"+hex.EncodeToString(b[:])+":"),
		// A cached denial is timed by the wall clock, not the log's.
		engine.WithCachedDenials(false),
		engine.WithTimeout(10*time.Second))
	if err != nil {
		s.Close()
		return nil, fmt.Errorf("replay: %w", err)
	}
	s.eng = e
	return s, nil
}

func (s *script) decide(scope string, req *engine.Request, counted bool, t int64, v *verdict) error {
	v.reset(req)
	s.now.Store(t)
	if s.mini != nil && t-s.miniAt >= int64(time.Second/time.Microsecond) {
		// Let miniredis expire keys as the log's time passes, so that its
		// memory is the live windows'.
		if s.miniAt != 0 {
			s.mini.FastForward(time.Duration(t-s.miniAt) * time.Microsecond)
		}
		s.miniAt = t
	}
	ctx := context.Background()
	req.Scope = scope
	d, err := s.eng.Allow(ctx, *req)
	if err != nil {
		return fmt.Errorf("replay: engine: %w", err)
	}
	v.allowed = d.Allowed
	if d.Allowed {
		if !counted {
			if err := s.eng.Finish(ctx, d, engine.Outcome{GiveBack: true}); err != nil {
				return fmt.Errorf("replay: engine: give-back: %w", err)
			}
		}
		return nil
	}
	for _, ws := range d.Windows {
		c := &req.Checks[ws.Check]
		for j, w := range c.Windows {
			if w == ws.Window && ws.Used+max(c.Cost, 1) > w.Limit {
				v.checks[ws.Check].full[j] = true
			}
		}
	}
	if d.Blocked {
		// A blocked check reports every window with nothing remaining,
		// though its counts leave room; a check with a full window started
		// its block (or was already blocked: the decision does not say).
		for i, c := range req.Checks {
			if c.Block <= 0 {
				continue
			}
			if anyTrue(v.checks[i].full) {
				v.checks[i].started = true
				continue
			}
			forced := false
			for _, ws := range d.Windows {
				if ws.Check == i && ws.Remaining == 0 {
					forced = true
				}
			}
			v.checks[i].blocked = forced
		}
	}
	return nil
}

func (s *script) Close() error {
	if s.eng != nil {
		s.eng.Close()
	}
	if s.client != nil {
		s.client.Close()
	}
	if s.mini != nil {
		s.mini.Close()
	}
	return nil
}
