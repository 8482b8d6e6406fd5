package engine

import (
	"context"
	"errors"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// Cached denials are only as good as the news of removed entries: a Reset,
// a give-back or a rollback in any process frees room that this process's
// cache does not see. Every process therefore publishes the keys it
// removed entries from on one channel (the key prefix + "invalidate"), after
// the removal took effect, and every process with the cache subscribes to
// it. A process that has not heard from its subscription for a while
// (see denials.Cache.Trusted; it pings every pingEvery when there is no
// traffic) makes no cached denial until it hears again, and an answer stored before the current
// subscription was confirmed never denies: invalidations sent meanwhile
// may have been missed.

// Invalidation message kinds, the message's first byte; keys follow,
// separated by spaces (keys never hold a space: it is percent-encoded).
const (
	invalReset   = 'R' // the keys were deleted: forget them everywhere
	invalRemoved = 'E' // entries were removed: the known state is stale
)

const pingEvery = 250 * time.Millisecond

// subscriber is implemented by *redis.Client, *redis.ClusterClient and
// *redis.Ring.
type subscriber interface {
	Subscribe(ctx context.Context, channels ...string) *redis.PubSub
}

func (e *Engine) channel() string { return e.keyer.Prefix() + "invalidate" }

// listen starts the subscription to the invalidation channel. It waits up
// to a second (or the engine's timeout, if longer) for the first
// confirmation, so that a new engine makes cached denials from its first
// answers on; a Redis that refuses connections ends the wait at once, and
// one that does not answer yet only delays cached denials.
func (e *Engine) listen(s subscriber) {
	ps := s.Subscribe(context.Background(), e.channel())
	e.pubsub = ps
	e.listenDone = make(chan struct{})
	first := make(chan struct{})
	go e.receive(ps, first)
	select {
	case <-first:
	case <-time.After(max(e.timeout, time.Second)):
	}
}

// receive runs until Close: it applies invalidations, keeps the
// subscription's health in e.known, and pings when the channel is quiet.
func (e *Engine) receive(ps *redis.PubSub, first chan struct{}) {
	defer close(e.listenDone)
	ctx := context.Background()
	k := e.known
	for {
		msg, err := ps.ReceiveTimeout(ctx, pingEvery)
		if e.closed.Load() {
			return
		}
		if err != nil {
			if errors.Is(err, redis.ErrClosed) {
				return
			}
			if !isTimeout(err) {
				// The connection broke; the next receive reconnects and
				// subscribes again. Until confirmed, nothing is trusted.
				k.Lost()
				if first != nil { // New waits no longer for a Redis that is down
					close(first)
					first = nil
				}
				e.sleep(pingEvery)
			}
			_ = ps.Ping(ctx)
			continue
		}
		now, heard := e.monoElapsed()
		switch m := msg.(type) {
		case *redis.Subscription:
			if m.Kind == "subscribe" {
				k.Confirmed(now, heard)
				if first != nil {
					close(first)
					first = nil
				}
			}
		case *redis.Pong:
			k.HeardAt(heard)
		case *redis.Message:
			k.HeardAt(heard)
			e.applyInvalidation(m.Payload, now)
		}
	}
}

// sleep waits for d or until Close.
func (e *Engine) sleep(d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-e.stop:
	}
}

func (e *Engine) applyInvalidation(payload string, now int64) {
	if payload == "" {
		return
	}
	kind, keys := payload[0], payload[1:]
	for key := range strings.FieldsSeq(keys) {
		e.known.Invalidate(key, now)
		if kind == invalReset {
			e.local.Forget(key)
		}
	}
}

// publishCmd returns the PUBLISH command announcing that entries were
// removed from keys (kind invalRemoved) or that keys were deleted
// (invalReset), or nil when there are no keys. Every engine publishes,
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
