package engine

import (
	"context"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/slidelimit/slidelimit/engine/internal/denials"
)

// The invalidations of cached denials: see denials.Listener.

func (e *Engine) channel() string { return e.keyer.Prefix() + "invalidate" }

// listen starts the subscription to the invalidation channel, waiting at
// most a second (or the engine's timeout, if longer) for its confirmation.
func (e *Engine) listen(s denials.Subscriber) {
	e.inval = denials.Listen(s, denials.ListenConfig{
		Channel: e.channel(), Cache: e.known, Clock: e.monoElapsed, Reset: e.local.Forget,
		Stop: e.stop, Closed: e.closed.Load,
	}, max(e.timeout, time.Second))
}

// publishCmd returns the PUBLISH command announcing that entries were
// removed from keys (kind denials.Removed) or that keys were deleted
// (denials.Reset), or nil when there are no keys. Every engine publishes,
// also with cached denials off: other processes may have them on.
func (e *Engine) publishCmd(ctx context.Context, kind byte, keys ...string) *redis.IntCmd {
	if len(keys) == 0 {
		return nil
	}
	n := 1 + len(keys)
	for _, k := range keys {
		n += len(k)
	}
	var b strings.Builder
	b.Grow(n)
	b.WriteByte(kind)
	for i, k := range keys {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(k)
	}
	return redis.NewIntCmd(ctx, "publish", e.channel(), b.String())
}

// forgetKnown invalidates keys in this process's cache.
func (e *Engine) forgetKnown(keys []string) {
	if len(keys) == 0 {
		return // without reading the clock: most finishes forget nothing
	}
	now := e.mono()
	for _, k := range keys {
		e.known.Invalidate(k, now)
	}
}

// publish announces removed entries after they were removed, and forgets
// them in this process's cache at once.
func (e *Engine) publish(ctx context.Context, kind byte, keys ...string) {
	cmd := e.publishCmd(ctx, kind, keys...)
	if cmd == nil {
		return
	}
	e.forgetKnown(keys)
	if err := e.client.Process(ctx, cmd); err != nil {
		e.log.Warn("engine: could not publish an invalidation; other processes' caches keep it until the subscription is renewed or the entries leave",
			"err", err)
	}
}
