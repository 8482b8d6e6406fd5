package redistest

import (
	"context"
	"sync/atomic"

	"github.com/redis/go-redis/v9"
)

// CommandCounter is a go-redis hook (redis.Hook) that counts the commands a
// client sends, pipelined ones included. Add it with AddHook; it is safe
// for concurrent use, and its zero value counts from 0.
type CommandCounter struct{ n atomic.Int64 }

var _ redis.Hook = (*CommandCounter)(nil)

// Count returns the number of commands sent so far.
func (c *CommandCounter) Count() int64 { return c.n.Load() }

// DialHook passes dials through.
func (c *CommandCounter) DialHook(next redis.DialHook) redis.DialHook { return next }

// ProcessHook counts one command.
func (c *CommandCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		c.n.Add(1)
		return next(ctx, cmd)
	}
}

// ProcessPipelineHook counts every command of a pipeline.
func (c *CommandCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		c.n.Add(int64(len(cmds)))
		return next(ctx, cmds)
	}
}

// RoundTripCounter is a go-redis hook (redis.Hook) that counts round
// trips: each command sent alone and each pipeline (MULTI/EXEC included)
// is one. Add it to every client whose round trips count: on a cluster,
// to each node's client (see ClusterRoundTrips), since a cluster client
// sends a pipeline per node. It is safe for concurrent use, and its zero
// value counts from 0.
type RoundTripCounter struct{ n atomic.Int64 }

var _ redis.Hook = (*RoundTripCounter)(nil)

// Count returns the number of round trips so far.
func (c *RoundTripCounter) Count() int64 { return c.n.Load() }

// DialHook passes dials through.
func (c *RoundTripCounter) DialHook(next redis.DialHook) redis.DialHook { return next }

// ProcessHook counts one round trip.
func (c *RoundTripCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		c.n.Add(1)
		return next(ctx, cmd)
	}
}

// ProcessPipelineHook counts one round trip for the whole pipeline.
func (c *RoundTripCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		c.n.Add(1)
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
