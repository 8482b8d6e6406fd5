package engine

import (
	"context"

	"github.com/redis/go-redis/v9"
)

// Client is the part of a go-redis client the engine uses. *redis.Client,
// *redis.ClusterClient, *redis.Ring and every redis.UniversalClient satisfy
// it.
//
// The engine chooses how to group keys into script calls from the dynamic
// type: a *redis.Client (a single server, or a Sentinel failover client)
// gets every key of a batch of concurrent requests in one script call; a
// *redis.ClusterClient gets one call per hash slot; any other Client (a
// Ring, or a wrapper the engine cannot see through) gets one call per key,
// which is correct whatever the sharding.
type Client interface {
	Process(ctx context.Context, cmd redis.Cmder) error
	Pipeline() redis.Pipeliner
}

var (
	_ Client = (*redis.Client)(nil)
	_ Client = (*redis.ClusterClient)(nil)
	_ Client = (*redis.Ring)(nil)
	_ Client = redis.UniversalClient(nil)
)

// grouping says which keys may share one script call.
type grouping uint8

const (
	groupAll  grouping = iota // one server: any keys together
	groupSlot                 // Redis Cluster: keys of one hash slot
	groupKey                  // unknown sharding: each key alone
)

func groupingOf(c Client) grouping {
	switch c.(type) {
	case *redis.Client:
		return groupAll
	case *redis.ClusterClient:
		return groupSlot
	default:
		return groupKey
	}
}

// contextTimeouts reports whether the client applies context deadlines to
// its sockets, when the engine can tell.
func contextTimeouts(c Client) (enabled, known bool) {
	switch c := c.(type) {
	case *redis.Client:
		return c.Options().ContextTimeoutEnabled, true
	case *redis.ClusterClient:
		return c.Options().ContextTimeoutEnabled, true
	case *redis.Ring:
		return c.Options().ContextTimeoutEnabled, true
	}
	return false, false
}
