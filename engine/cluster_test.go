package engine

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/slidelimit/slidelimit/internal/redistest"
	"github.com/slidelimit/slidelimit/rules"
)

func global(ws ...rules.Window) Check {
	return Check{Rule: rules.Rule{Kind: rules.Global, Windows: ws}}
}

// nodeEntries reads every key under prefix on every node of cl directly
// (SCAN and ZSCAN on each master) and returns, per key, its entries as
// member -> score, markers left out. It checks that each key is on the
// node its slot says, as computed by the engine and by the node itself.
func nodeEntries(t *testing.T, cl *redistest.Cluster, prefix string) map[string]map[string]int64 {
	t.Helper()
	ctx := context.Background()
	all := map[string]map[string]int64{}
	for _, n := range cl.Nodes {
		c := redis.NewClient(&redis.Options{Addr: n.Addr})
		for _, k := range scanKeys(t, c, prefix) {
			s, err := c.ClusterKeySlot(ctx, k).Result()
			if err != nil || s != int64(slot(k)) {
				t.Errorf("key %q: CLUSTER KEYSLOT %d (%v), engine slot %d", k, s, err, slot(k))
			}
			m := map[string]int64{}
			var cursor uint64
			for {
				kv, next, err := c.ZScan(ctx, k, cursor, "", 1000).Result()
				if err != nil {
					t.Fatal(err)
				}
				for i := 0; i+1 < len(kv); i += 2 {
					score, err := strconv.ParseFloat(kv[i+1], 64)
					if err != nil {
						t.Fatal(err)
					}
					if score >= 0 {
						m[kv[i]] = int64(score)
					}
				}
				if cursor = next; cursor == 0 {
					break
				}
			}
			all[k] = m
		}
		c.Close()
	}
	return all
}

func sortedTimes(m map[string]int64) []int64 {
	var ts []int64
	for _, v := range m {
		ts = append(ts, v)
	}
	slices.Sort(ts)
	return ts
}

// TestCluster runs the cluster tests on one cluster (starting one takes
// seconds); each subtest has its own prefix.
func TestCluster(t *testing.T) {
	t.Parallel()
	cl := redistest.StartCluster(t)
	// Not parallel: it blocks a node, which would starve the audit.
	t.Run("timed out part", func(t *testing.T) { clusterTimedOut(t, cl) })
	t.Run("audit", func(t *testing.T) { t.Parallel(); auditCluster(t, cl) })
	t.Run("rollback", func(t *testing.T) { t.Parallel(); clusterRollback(t, cl) })
	t.Run("audit costs", func(t *testing.T) { t.Parallel(); auditCostsCluster(t, cl) })
	t.Run("give back mixed suffixes", func(t *testing.T) { t.Parallel(); clusterGiveBack(t, cl) })
	t.Run("script flush", func(t *testing.T) {
		t.Parallel()
		prefix := redistest.Prefix(t)
		afterClusterTTLs(t, cl, prefix)
		cc := cl.Client(t)
		e := newEngine(t, cc, WithKeyPrefix(prefix))
		flushDuring(t, e, func() error {
			return cc.ForEachMaster(context.Background(), func(ctx context.Context, c *redis.Client) error {
				return c.ScriptFlush(ctx).Err()
			})
		}, time.Second)
	})
	t.Run("semantics", func(t *testing.T) {
		t.Parallel()
		cc := cl.Client(t)
		for sc, cached := range cacheModes(scenarios()) {
			t.Run(sc.name+cacheName(cached), func(t *testing.T) {
				t.Parallel()
				prefix := redistest.Prefix(t)
				afterClusterTTLs(t, cl, prefix)
				clk := redistest.NewClock()
				e := newEngine(t, cc, WithKeyPrefix(prefix), WithClock(clk.Now), WithCachedDenials(cached))
				runScenario(t, e, clk, sc, fromRedis)
			})
		}
	})
}

func auditCluster(t *testing.T, cl *redistest.Cluster) {
	prefix := redistest.Prefix(t)
	afterClusterTTLs(t, cl, prefix)
	engines := auditEngines(t, func() Client { return cl.Client(t) }, WithKeyPrefix(prefix))
	userWs := []rules.Window{win(20, 200*ms), win(60, time.Second)}
	ipWs := []rules.Window{win(30, 200*ms), win(100, time.Second)}
	globalWs := []rules.Window{win(20, 200*ms), win(50, time.Second)}
	var reqs []Request
	for u := range 4 {
		reqs = append(reqs, req(ip(fmt.Sprint("10.0.0.", u%2), ipWs...), user(fmt.Sprint("u", u), userWs...), global(globalWs...)))
	}
	// Keepers: an hour-long window on every key, so that nothing is
	// trimmed and every admission can be audited.
	keeper := win(1_000_000, time.Hour)
	keys := map[string][]rules.Window{}
	for _, r := range reqs {
		for _, c := range r.Checks {
			k := engines[0].keyOf("s", c)
			if keys[k] == nil {
				keys[k] = c.Windows
				c.Windows = []rules.Window{keeper}
				mustAllow(t, engines[0], req(c), true)
			}
		}
	}

	var ds deniedLog
	admitted := hammerRecord(t, engines, 16, auditDuration, func(i int) Request { return reqs[i%len(reqs)] }, &ds)

	got := nodeEntries(t, cl, prefix)
	if len(got) != len(keys) {
		t.Fatalf("%d keys on the nodes, want %d", len(got), len(keys))
	}
	slots := map[uint16]bool{}
	for k := range keys {
		slots[slot(k)] = true
	}
	if len(slots) < 2 {
		t.Fatalf("keys share one slot; the test needs them spread")
	}
	// All or nothing: a run member is in its global, user and ip keys and
	// nowhere else; a keeper is in one key.
	where := map[string][]string{}
	for k, m := range got {
		for member := range m {
			where[member] = append(where[member], k)
		}
	}
	run := 0
	for member, ks := range where {
		switch len(ks) {
		case 1: // a keeper
		case 3:
			run++
			slices.Sort(ks)
			ok := false
			for _, r := range reqs {
				var want []string
				for _, c := range r.Checks {
					want = append(want, engines[0].keyOf("s", c))
				}
				slices.Sort(want)
				ok = ok || slices.Equal(ks, want)
			}
			if !ok {
				t.Errorf("member %s in keys %v, which no request has", member, ks)
			}
		default:
			t.Errorf("member %s in %d keys: %v", member, len(ks), ks)
		}
	}
	if int64(run) != admitted {
		t.Errorf("%d members in three keys, %d admissions counted by the callers", run, admitted)
	}
	for k, ws := range keys {
		checkWindows(t, k, sortedTimes(got[k]), ws)
	}
	// Keys whose windows never bind (ip) see no denial: check the
	// others'. Rolled-back reservations are in no key's entries.
	denied := 0
	for k := range keys {
		if slices.ContainsFunc(ds.list, func(d denial) bool { return d.key == k }) {
			denied += checkDenials(t, k, k, &ds, admissionsOf(sortedTimes(got[k])), true, false)
		}
	}
	if denied == 0 {
		t.Errorf("no denial by a window; the audit did not saturate them")
	}
	// The global windows bind: the users' and IPs' allow more.
	ts := sortedTimes(got[engines[0].keyOf("s", global())])
	checkCapacity(t, ts, globalWs)
}
