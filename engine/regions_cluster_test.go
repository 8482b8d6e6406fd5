package engine

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/slidelimit/slidelimit/internal/redistest"
	"github.com/slidelimit/slidelimit/rules"
)

// TestRegionsCluster checks the share rule on a Redis Cluster region, and
// replication from a single server to a Cluster peer and back: entries
// of keys in many slots arrive, one script call per hash tag, and leave
// their copies once acknowledged.
func TestRegionsCluster(t *testing.T) {
	cl := redistest.StartCluster(t)
	cc := cl.Client(t)
	shareCase(t, cc, 4)
	shareCase(t, cc, 9) // full for the share: cached denials
	copiesTrimmed(t, cc)

	ctx := context.Background()
	_, single := redistest.StartClient(t)
	prefix := redistest.Prefix(t)
	toCluster := newEngine(t, single, WithKeyPrefix(prefix), WithRegions("eu", map[string]Client{"us": cc}))
	toSingle := newEngine(t, cc, WithKeyPrefix(prefix), WithRegions("us", map[string]Client{"eu": single}))
	const subjects = 20
	for i := range subjects {
		req := One("s", rules.User, "u"+strconv.Itoa(i), win(10, time.Minute))
		for _, e := range []*Engine{toCluster, toSingle} {
			if d, err := e.Allow(ctx, req); err != nil || !d.Allowed {
				t.Fatalf("subject %d: %v, %v", i, d.Allowed, err)
			}
		}
	}
	redistest.Eventually(t, "every entry in both regions, none unstable", func() bool {
		for i := range subjects {
			key := string(toCluster.keyer.AppendKeyOf(nil, "s", rules.User, "", "", "u"+strconv.Itoa(i), false))
			if single.ZCount(ctx, key, "0", "+inf").Val() != 2 || cc.ZCount(ctx, key, "0", "+inf").Val() != 2 ||
				single.ZCount(ctx, key, "-inf", copiesMax).Val()+cc.ZCount(ctx, key, "-inf", copiesMax).Val() != 0 {
				return false
			}
		}
		return true
	})
}
