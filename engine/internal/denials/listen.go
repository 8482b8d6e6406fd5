package denials

import (
	"context"
	"errors"
	"net"
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
// (see Cache.Trusted; it pings every PingEvery when there is no traffic)
// makes no cached denial until it hears again, and an answer stored before
// the current subscription was confirmed never denies: invalidations sent
// meanwhile may have been missed.

// Invalidation message kinds, the message's first byte; keys follow,
// separated by spaces (keys never hold a space: it is percent-encoded).
const (
	Reset   = 'R' // the keys were deleted: forget them everywhere
	Removed = 'E' // entries were removed: the known state is stale
)

// PingEvery is how often a quiet subscription pings.
const PingEvery = 250 * time.Millisecond

// A Subscriber subscribes to channels: *redis.Client, *redis.ClusterClient
// and *redis.Ring are Subscribers.
type Subscriber interface {
	Subscribe(ctx context.Context, channels ...string) *redis.PubSub
}

// ListenConfig is what a subscription needs from its engine.
type ListenConfig struct {
	Channel string
	Cache   *Cache
	// Clock returns the engine's mono and elapsed clocks (µs).
	Clock func() (mono, elapsed int64)
	// Reset forgets a deleted key elsewhere (the local fallback).
	Reset  func(key string)
	Stop   <-chan struct{} // closed when the engine closes
	Closed func() bool     // whether the engine closed
}

// A Listener applies the invalidations of other processes to a Cache.
type Listener struct {
	cfg  ListenConfig
	ps   *redis.PubSub
	done chan struct{}
}

// Listen starts the subscription to the invalidation channel. It waits up
// to wait for the first confirmation, so that a new engine makes cached
// denials from its first answers on; a Redis that refuses connections ends
// the wait at once, and one that does not answer yet only delays cached
// denials.
func Listen(s Subscriber, cfg ListenConfig, wait time.Duration) *Listener {
	l := &Listener{cfg: cfg, ps: s.Subscribe(context.Background(), cfg.Channel), done: make(chan struct{})}
	first := make(chan struct{})
	go l.receive(first)
	select {
	case <-first:
	case <-time.After(wait):
	}
	return l
}

// Close ends the subscription and waits for its goroutine.
func (l *Listener) Close() {
	_ = l.ps.Close()
	<-l.done
}

// receive runs until Close: it applies invalidations, keeps the
// subscription's health in the cache, and pings when the channel is quiet.
func (l *Listener) receive(first chan struct{}) {
	defer close(l.done)
	ctx := context.Background()
	k := l.cfg.Cache
	for {
		msg, err := l.ps.ReceiveTimeout(ctx, PingEvery)
		if l.cfg.Closed() {
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
				l.sleep(PingEvery)
			}
			_ = l.ps.Ping(ctx)
			continue
		}
		now, heard := l.cfg.Clock()
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
			l.apply(m.Payload, now)
		}
	}
}

// sleep waits for d or until the engine closes.
func (l *Listener) sleep(d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-l.cfg.Stop:
	}
}

func (l *Listener) apply(payload string, now int64) {
	if payload == "" {
		return
	}
	kind, keys := payload[0], payload[1:]
	for key := range strings.FieldsSeq(keys) {
		l.cfg.Cache.Invalidate(key, now)
		if kind == Reset {
			l.cfg.Reset(key)
		}
	}
}

func isTimeout(err error) bool {
	if errors.Is(err, context.DeadlineExceeded) {
		return true
	}
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}
