package engine

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/slidelimit/slidelimit/internal/redistest"
	"github.com/slidelimit/slidelimit/rules"
)

// TestRegionsCluster checks the share rule on a Redis Cluster region, and
// replication from a single server to a Cluster peer and back: entries
// of keys in many slots arrive, one script call per hash tag, and leave
// their copies once acknowledged; a block and a reset reach the other
// region either way.
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
	// Every entry in both regions, none unstable: within 20 s, the most a
	// peer that found itself behind (a batch waited 250 ms on a loaded
	// machine) holds acknowledgements, its flag's 5 s life, and more.
	var missing string
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		missing = ""
		for i := range subjects {
			key := string(toCluster.keyer.AppendKeyOf(nil, "s", rules.User, "", "", "u"+strconv.Itoa(i), false))
			ns, nc := single.ZCount(ctx, key, "0", "+inf").Val(), cc.ZCount(ctx, key, "0", "+inf").Val()
			us, uc := single.ZCount(ctx, key, "-inf", copiesMax).Val(), cc.ZCount(ctx, key, "-inf", copiesMax).Val()
			if ns != 2 || nc != 2 || us+uc != 0 {
				missing = fmt.Sprintf("subject %d: %d and %d entries, %d and %d copies (single, Cluster); stats %+v, %+v",
					i, ns, nc, us, uc, toCluster.RegionStats(), toSingle.RegionStats())
				break
			}
		}
		if missing == "" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after 20 s, %s", missing)
		}
	}

	// A block started on the single server reaches the Cluster, beside
	// its key in the key's slot, and one started on the Cluster the single
	// server.
	for i, from := range []*Engine{toCluster, toSingle} {
		user := "blocked" + strconv.Itoa(i)
		req := One("s", rules.User, user, win(1, time.Minute))
		req.Checks[0].Block = time.Minute
		key := string(from.keyer.AppendKeyOf(nil, "s", rules.User, "", "", user, false))
		local, other := redis.UniversalClient(single), toSingle
		if from == toSingle {
			local, other = cc, toCluster
		}
		// A full window (an entry the other region never sees): the
		// denial blocks.
		local.ZAdd(ctx, key, redis.Z{Score: float64(time.Now().UnixMicro()), Member: "x"})
		if d, err := from.Allow(ctx, req); err != nil || !d.Blocked {
			t.Fatalf("a full window: blocked %v, %v", d.Blocked, err)
		}
		redistest.Eventually(t, "the block in the other region", func() bool {
			return single.Exists(ctx, key+":block").Val()+cc.Exists(ctx, key+":block").Val() == 2
		})
		if d, err := other.Peek(ctx, req); err != nil || d.Allowed || !d.Blocked {
			t.Errorf("the other region during the block: allowed %v, blocked %v, %v", d.Allowed, d.Blocked, err)
		}
		// A reset lifts it in both regions, its floor beside the key in
		// the key's slot (a limit of 10: at 1 or 2 a region's share of
		// what the other admits first may be 0, which starts a block).
		req.Checks[0].Windows[0].Limit = 10
		if err := from.ResetRequest(ctx, req); err != nil {
			t.Fatal(err)
		}
		for _, e := range []*Engine{from, other} {
			redistest.Eventually(t, "admitted after the reset", func() bool {
				d, _ := e.Allow(ctx, req)
				return d.Allowed
			})
		}
		if n := single.ZCount(ctx, key, "0", "+inf").Val() + cc.ZCount(ctx, key, "0", "+inf").Val(); n > 4 {
			t.Errorf("%d entries in both regions after the reset, want the 2 admitted since in each", n)
		}
	}
}
