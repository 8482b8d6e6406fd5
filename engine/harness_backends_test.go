package engine

import (
	"testing"

	"github.com/slidelimit/slidelimit/internal/faults"
)

// The harness's backends are internal/faults's (faults.MiniredisBackend,
// faults.RedisBackend, faults.ClusterBackend), which the throttle's
// harness in the root package runs on too.

func fromBackend(b *faults.Backend) *faultBackend {
	return &faultBackend{
		name:     b.Name,
		caps:     b.Caps,
		timeout:  b.Timeout,
		client:   func() Client { return b.Client() },
		kill:     b.Kill,
		restart:  b.Restart,
		alive:    b.Alive,
		sleep:    b.Sleep,
		evict:    b.Evict,
		healthy:  b.Healthy,
		serves:   b.Serves,
		failover: b.Failover,
	}
}

func miniredisBackend(t *testing.T) *faultBackend { return fromBackend(faults.MiniredisBackend(t)) }

func redisBackend(t *testing.T) *faultBackend { return fromBackend(faults.RedisBackend(t)) }

func clusterBackend(t *testing.T, failover bool) *faultBackend {
	return fromBackend(faults.ClusterBackend(t, failover))
}
