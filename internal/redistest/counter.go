package redistest

import (
	"context"
	"sync/atomic"

	"github.com/redis/go-redis/v9"
)

// CommandCounter is a go-redis hook (redis.Hook) that counts the commands a
// client sends, pipelined ones included. Add it with AddHook; it is safe
// for concurrent use, and its zero value counts from 0.
type CommandCounter struct{ counter }

// RoundTripCounter is a go-redis hook (redis.Hook) that counts round
// trips: each command sent alone and each pipeline (MULTI/EXEC included)
// is one. Add it to every client whose round trips count: on a cluster,
// to each node's client (see ClusterRoundTrips), since a cluster client
// sends a pipeline per node. It is safe for concurrent use, and its zero
// value counts from 0.
type RoundTripCounter struct{ counter }

var (
	_ redis.Hook = (*CommandCounter)(nil)
	_ redis.Hook = (*RoundTripCounter)(nil)
)

// ProcessPipelineHook counts every command of a pipeline.
func (c *CommandCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return c.pipeline(next, func(cmds []redis.Cmder) int64 { return int64(len(cmds)) })
}

// ProcessPipelineHook counts one round trip for the whole pipeline.
func (c *RoundTripCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return c.pipeline(next, func([]redis.Cmder) int64 { return 1 })
}

// counter is what both counters share: a command sent alone counts one.
type counter struct{ n atomic.Int64 }

// Count returns the count so far.
func (c *counter) Count() int64 { return c.n.Load() }

// DialHook passes dials through.
func (c *counter) DialHook(next redis.DialHook) redis.DialHook { return next }

// ProcessHook counts one command.
func (c *counter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		c.n.Add(1)
		return next(ctx, cmd)
	}
}

// pipeline counts what weight says of each pipeline.
func (c *counter) pipeline(next redis.ProcessPipelineHook, weight func([]redis.Cmder) int64) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		c.n.Add(weight(cmds))
		return next(ctx, cmds)
	}
}

// ClusterRoundTrips returns cluster options whose node clients count their
// round trips in c: a pipeline to three masters is three.
func ClusterRoundTrips(c *RoundTripCounter) *redis.ClusterOptions {
	return &redis.ClusterOptions{NewClient: func(o *redis.Options) *redis.Client {
		n := redis.NewClient(o)
		n.AddHook(c)
		return n
	}}
}
