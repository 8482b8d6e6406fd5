package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/slidelimit/slidelimit/internal/embedded"
)

// backend is the Redis the demo limits against.
type backend struct {
	client redis.UniversalClient
	desc   string
	close  func()
}

// openBackend connects to -cluster, else -redis, else starts an embedded
// miniredis so that the demo runs on a machine with nothing but Go; its
// close stops the client, then the store.
func openBackend(ctx context.Context, redisURL, cluster string) (*backend, error) {
	switch {
	case redisURL != "" && cluster != "":
		return nil, errors.New("demo: use either -redis or -cluster, not both")
	case cluster != "":
		var addrs []string
		for a := range strings.SplitSeq(cluster, ",") {
			if a = strings.TrimSpace(a); a != "" {
				addrs = append(addrs, a)
			}
		}
		if len(addrs) == 0 {
			return nil, errors.New("demo: -cluster: no address")
		}
		// ContextTimeoutEnabled lets the engine's per-call timeout reach
		// the socket, so a hanging node costs 100ms, not go-redis's 3s; a
		// short reload interval and one dial attempt find a promoted
		// replica soon after a failover (see bench/failover/README.md).
		c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs, ContextTimeoutEnabled: true,
			ClusterStateReloadInterval: 200 * time.Millisecond, DialerRetries: 1})
		return ping(ctx, &backend{client: c, desc: "Redis Cluster " + strings.Join(addrs, ","), close: func() { c.Close() }})
	case redisURL != "":
		opt, err := redis.ParseURL(redisURL)
		if err != nil {
			// go-redis's message may quote the URL, password included.
			return nil, errors.New("demo: -redis: not a redis:// or rediss:// URL")
		}
		// As docs/engine.md recommends: the engine's timeout reaches the
		// socket, and a refused connection fails at once, so the engine
		// knows Redis is down without waiting for the timeout.
		opt.ContextTimeoutEnabled, opt.DialerRetries, opt.MaxRetries = true, 1, -1
		c := redis.NewClient(opt)
		return ping(ctx, &backend{client: c, desc: "Redis " + opt.Addr, close: func() { c.Close() }})
	default:
		// Its keys expire with the real clock, as on Redis (a plain
		// miniredis keeps every key until told time passed).
		m, err := embedded.Start()
		if err != nil {
			return nil, fmt.Errorf("demo: embedded miniredis: %w", err)
		}
		c := redis.NewClient(&redis.Options{Addr: m.Addr(), ContextTimeoutEnabled: true})
		return &backend{client: c, desc: "embedded miniredis " + m.Addr() + " (pass -redis URL for a real Redis)",
			close: func() { c.Close(); m.Close() }}, nil
	}
}

func ping(ctx context.Context, b *backend) (*backend, error) {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	if err := b.client.Ping(ctx).Err(); err != nil {
		b.close()
		return nil, fmt.Errorf("demo: %s: %w", b.desc, err)
	}
	return b, nil
}
