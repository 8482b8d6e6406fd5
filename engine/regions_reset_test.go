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

// miniRegions starts regions ap, eu and us on three miniredis servers,
// each reaching the others directly (no lag but the replicator's), and an
// engine for each, sharing a prefix.
func miniRegions(t *testing.T) ([]*Engine, []*redis.Client) {
	names := []string{"ap", "eu", "us"}
	var locals []*redis.Client
	for range names {
		_, c := redistest.Mini(t)
		locals = append(locals, c)
	}
	prefix := redistest.Prefix(t)
	var engines []*Engine
	for i, name := range names {
		peers := map[string]Client{}
		for j, peer := range names {
			if j != i {
				peers[peer] = locals[j]
			}
		}
		engines = append(engines, newEngine(t, locals[i], WithKeyPrefix(prefix), WithRegions(name, peers)))
	}
	return engines, locals
}

// stamped counts the entries of key in c (not its copies or markers).
func stamped(c *redis.Client, key string) int64 {
	return c.ZCount(context.Background(), key, "0", "+inf").Val()
}

// floorOf returns the reset floor key holds in c (its marker 'f'), or 0.
func floorOf(c *redis.Client, key string) int64 {
	f, err := c.ZScore(context.Background(), key, "f").Result()
	if err != nil {
		return 0
	}
	return -int64(f)
}

// TestRegionsReset checks a reset made in region eu, on three
// redis-servers 5-15 ms apart and on miniredis: a subject at its limit in
// every region (each denying from its cache) is admitted again in every
// region within the lag, every region keeps the floor and no entry
// stamped at or before it, and afterwards the regions admit one fresh
// limit together (within the share rule's L + R - 1), not one each.
func TestRegionsReset(t *testing.T) {
	t.Run("redis", func(t *testing.T) {
		_, engines, locals := threeRegions(t)
		regionsReset(t, engines, locals)
	})
	t.Run("miniredis", func(t *testing.T) {
		engines, locals := miniRegions(t)
		regionsReset(t, engines, locals)
	})
}

func regionsReset(t *testing.T, engines []*Engine, locals []*redis.Client) {
	ctx := context.Background()
	const limit = 6
	req := One("s", rules.User, "u1", win(limit, time.Minute))
	key := string(engines[0].keyer.AppendKeyOf(nil, "s", rules.User, "", "", "u1", false))
	fill := func() int {
		admitted := 0
		redistest.Eventually(t, "the limit taken in every region", func() bool {
			for _, e := range engines {
				if d, _ := e.Allow(ctx, req); d.Allowed {
					admitted++
				}
			}
			for _, c := range locals {
				if stamped(c, key) < limit {
					return false
				}
			}
			return true
		})
		return admitted
	}
	// The share rule's bound near the limit: L + R - 1 (docs/regions.md).
	if n := fill(); n < limit || n > limit+2 {
		t.Fatalf("the regions admitted %d, want %d to %d", n, limit, limit+2)
	}
	for i, e := range engines {
		if d, _ := e.Allow(ctx, req); d.Allowed {
			t.Fatalf("region %d admits at the limit", i)
		}
	}
	start := time.Now()
	if err := engines[1].ResetRequest(ctx, req); err != nil {
		t.Fatal(err)
	}
	floor := floorOf(locals[1], key)
	if floor == 0 {
		t.Fatal("no floor in eu's key")
	}
	for i, e := range engines {
		redistest.Eventually(t, "region "+strconv.Itoa(i)+" admits after the reset", func() bool {
			d, _ := e.Allow(ctx, req)
			return d.Allowed
		})
		t.Logf("region %d admits %v after the reset", i, time.Since(start).Round(time.Millisecond))
	}
	if took := time.Since(start); took > time.Second {
		t.Errorf("the reset took %v to reach every region; its lag is tens of ms, a cached denial lasts 1 s", took)
	}
	redistest.Eventually(t, "the floor in every region, 3 entries after it", func() bool {
		for _, c := range locals {
			if floorOf(c, key) != floor || c.ZCount(ctx, key, "0", strconv.FormatInt(floor, 10)).Val() != 0 || stamped(c, key) != 3 {
				return false
			}
		}
		return true
	})
	// One fresh limit across regions (within L + R - 1), not one each: 3
	// admitted above, the rest now.
	if n := 3 + fill(); n < limit || n > limit+2 {
		t.Errorf("after the reset the regions admitted %d, want %d to %d", n, limit, limit+2)
	}
}

// TestRegionsResetLate checks, on three redis-servers, the entries that
// cross a reset: region us, cut off, admits before eu's reset; eu admits
// after it. Once healed, us's admissions count nowhere (eu and ap drop
// them as they arrive, us drops its own and their copies when the reset
// reaches it) and eu's later admission counts everywhere.
func TestRegionsResetLate(t *testing.T) {
	ctx := context.Background()
	rs, engines, locals := threeRegions(t)
	req := One("s", rules.User, "late", win(10, time.Minute))
	key := string(engines[0].keyer.AppendKeyOf(nil, "s", rules.User, "", "", "late", false))
	rs.Cut(2)
	for range 2 {
		if d, err := engines[2].Allow(ctx, req); err != nil || !d.Allowed {
			t.Fatalf("us cut off: %v, %v", d.Allowed, err)
		}
	}
	if d, err := engines[1].Allow(ctx, req); err != nil || !d.Allowed {
		t.Fatalf("eu: %v, %v", d.Allowed, err)
	}
	redistest.Eventually(t, "eu's admission in ap", func() bool { return stamped(locals[0], key) == 1 })
	if err := engines[1].ResetRequest(ctx, req); err != nil {
		t.Fatal(err)
	}
	floor := floorOf(locals[1], key)
	redistest.Eventually(t, "the reset in ap", func() bool { return floorOf(locals[0], key) == floor && stamped(locals[0], key) == 0 })
	if d, err := engines[1].Allow(ctx, req); err != nil || !d.Allowed {
		t.Fatalf("eu after the reset: %v, %v", d.Allowed, err)
	}
	rs.Heal(2)
	redistest.Eventually(t, "healed: eu's later entry alone in every region, no copy", func() bool {
		for _, c := range locals {
			if floorOf(c, key) != floor || stamped(c, key) != 1 || c.ZCount(ctx, key, "-inf", copiesMax).Val() != 0 {
				return false
			}
			if c.ZCount(ctx, key, "("+strconv.FormatInt(floor, 10), "+inf").Val() != 1 {
				return false
			}
		}
		return true
	})
	// A region's queue drained: us's admissions dropped, never counted.
	redistest.Eventually(t, "queues drained", func() bool {
		for _, e := range engines {
			for _, s := range e.RegionStats() {
				if s.Queue != 0 {
					return false
				}
			}
		}
		return true
	})
	for i, c := range locals {
		if n := stamped(c, key); n != 1 {
			t.Errorf("region %d holds %d entries after the queues drained, want 1", i, n)
		}
	}
}

// TestRegionsResetRegional checks that a regional request's reset stays
// in its region: the peers keep their own counts of the same key and get
// no floor.
func TestRegionsResetRegional(t *testing.T) {
	ctx := context.Background()
	engines, locals := miniRegions(t)
	req := One("s", rules.User, "local", win(3, time.Minute))
	req.Regional = true
	key := string(engines[0].keyer.AppendKeyOf(nil, "s", rules.User, "", "", "local", false))
	for _, e := range engines {
		for range 3 {
			if d, err := e.Allow(ctx, req); err != nil || !d.Allowed {
				t.Fatalf("%v, %v", d.Allowed, err)
			}
		}
	}
	if err := engines[1].ResetRequest(ctx, req); err != nil {
		t.Fatal(err)
	}
	time.Sleep(200 * time.Millisecond) // what the replicator would send has arrived
	for i, c := range locals {
		want := int64(3)
		if i == 1 {
			want = 0
		}
		if n := stamped(c, key); n != want || floorOf(c, key) != 0 {
			t.Errorf("region %d: %d entries, floor %d; want %d and none", i, n, floorOf(c, key), want)
		}
	}
}

// TestRegionsResetBlock checks that a reset lifts a block in every
// region: ap's full window starts a block that reaches eu and us; eu's
// reset lifts it everywhere, and every region admits again.
func TestRegionsResetBlock(t *testing.T) {
	ctx := context.Background()
	_, engines, locals := threeRegions(t)
	req := One("s", rules.User, "blocked", win(5, time.Minute))
	req.Checks[0].Block = time.Minute
	key := string(engines[0].keyer.AppendKeyOf(nil, "s", rules.User, "", "", "blocked", false))
	now := time.Now().UnixMicro()
	for i := range 5 {
		locals[0].ZAdd(ctx, key, redis.Z{Score: float64(now - int64(i)), Member: "x" + strconv.Itoa(i)})
	}
	if d, err := engines[0].Allow(ctx, req); err != nil || !d.Blocked {
		t.Fatalf("a full window in ap: blocked %v, %v", d.Blocked, err)
	}
	redistest.Eventually(t, "the block in every region", func() bool {
		for _, e := range engines[1:] {
			if d, _ := e.Allow(ctx, req); !d.Blocked {
				return false
			}
		}
		return true
	})
	if err := engines[1].ResetRequest(ctx, req); err != nil {
		t.Fatal(err)
	}
	for i, e := range engines {
		redistest.Eventually(t, "region "+strconv.Itoa(i)+" admits after the reset", func() bool {
			d, _ := e.Allow(ctx, req)
			return d.Allowed
		})
		if v, _ := locals[i].Get(ctx, key+":block").Int64(); v >= 0 {
			t.Errorf("region %d's block key holds %d, want the floor (negative)", i, v)
		}
	}
}

// TestResetRequestWithoutRegions checks that without WithRegions
// ResetRequest runs the very Redis commands Reset runs for each check
// (INFO commandstats of a redis-server), and that both clear the keys.
func TestResetRequestWithoutRegions(t *testing.T) {
	ctx := context.Background()
	_, rc := redistest.StartClient(t)
	e := newEngine(t, rc, WithKeyPrefix(redistest.Prefix(t)))
	req := One("s", rules.User, "u1", win(3, time.Minute))
	req.Checks[0].Block = time.Minute
	key := string(e.keyer.AppendKeyOf(nil, "s", rules.User, "", "", "u1", false))
	counted := func(reset func() error) map[string]int64 {
		for range 4 { // the last one blocks
			if _, err := e.Allow(ctx, req); err != nil {
				t.Fatal(err)
			}
		}
		before := readCmdStats(t, rc)
		if err := reset(); err != nil {
			t.Fatal(err)
		}
		after := readCmdStats(t, rc)
		out := map[string]int64{}
		for k, v := range after {
			if d := v.calls - before[k].calls; d != 0 && k != "cpu" {
				out[k] = d
			}
		}
		if n := rc.Exists(ctx, key, key+":block").Val(); n != 0 {
			t.Errorf("%d of the key and its block key left after the reset", n)
		}
		return out
	}
	one := counted(func() error { return e.Reset(ctx, "s", req.Checks[0].Rule, "u1", false) })
	all := counted(func() error { return e.ResetRequest(ctx, req) })
	if one["del"] == 0 || fmt.Sprint(one) != fmt.Sprint(all) {
		t.Errorf("ResetRequest ran %v, Reset %v", all, one)
	}
}
