package engine

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/slidelimit/slidelimit/internal/redistest"
	"github.com/slidelimit/slidelimit/rules"
)

// threeRegions starts regions ap, eu and us (indexes 0, 1, 2) on three
// redis-servers with delaying proxies between them, and an engine for
// each, sharing prefix.
func threeRegions(t *testing.T) (*redistest.Regions, []*Engine, []*redis.Client) {
	rs := redistest.StartRegions(t, 3, 5*time.Millisecond, 15*time.Millisecond)
	names := []string{"ap", "eu", "us"}
	prefix := redistest.Prefix(t)
	var engines []*Engine
	var locals []*redis.Client
	for i, name := range names {
		peers := map[string]Client{}
		for j, peer := range names {
			if j != i {
				peers[peer] = rs.Peer(i, j)
			}
		}
		locals = append(locals, rs.Local(i))
		engines = append(engines, newEngine(t, locals[i], WithKeyPrefix(prefix), WithRegions(name, peers)))
	}
	return rs, engines, locals
}

// TestRegionsReplicate checks replication between three redis-servers:
// admissions reach every peer and lose their copies once both have
// acknowledged them; a region cut off keeps its admissions unstable and is
// held to its share; healing delivers them and stabilizes them; give-backs
// (Finish and FinishAsync) reach the peers; Close leaves no replication goroutine.
func TestRegionsReplicate(t *testing.T) {
	ctx := context.Background()
	rs, engines, locals := threeRegions(t)
	req := One("s", rules.User, "u1", win(30, time.Minute))
	key := string(engines[0].keyer.AppendKeyOf(nil, "s", rules.User, "", "", "u1", false))
	var first, second Decision
	for i := range 3 {
		d, err := engines[0].Allow(ctx, req)
		if err != nil || !d.Allowed {
			t.Fatalf("request %d: %v, %v", i, d.Allowed, err)
		}
		switch i {
		case 0:
			first = d
		case 1:
			second = d
		}
	}
	redistest.Eventually(t, "3 entries in every region, none unstable", func() bool {
		return locals[1].ZCount(ctx, key, "0", "+inf").Val() == 3 && locals[2].ZCount(ctx, key, "0", "+inf").Val() == 3 &&
			locals[0].ZCount(ctx, key, "-inf", copiesMax).Val() == 0
	})

	// Cut off: region ap (index 0) holds 3 stable entries, so its share is
	// floor((30 - 3 + 0) / 3) = 9.
	rs.Cut(0)
	admitted := 0
	for range 12 {
		if d, _ := engines[0].Allow(ctx, req); d.Allowed {
			admitted++
		}
	}
	if admitted != 9 {
		t.Errorf("cut off, region ap admitted %d, want its share 9", admitted)
	}
	if n := locals[0].ZCount(ctx, key, "-inf", copiesMax).Val(); n != 9 {
		t.Errorf("cut off: %d unstable entries, want 9", n)
	}
	redistest.Eventually(t, "peers unreachable in the stats", func() bool {
		st := engines[0].RegionStats()
		return len(st) == 2 && !st[0].Reachable && !st[1].Reachable && st[0].Queue == 9 && st[0].Lag > 0
	})

	rs.Heal(0)
	redistest.Eventually(t, "healed: 12 entries everywhere, none unstable", func() bool {
		return locals[1].ZCount(ctx, key, "0", "+inf").Val() == 12 && locals[2].ZCount(ctx, key, "0", "+inf").Val() == 12 &&
			locals[0].ZCount(ctx, key, "-inf", copiesMax).Val() == 0
	})
	redistest.Eventually(t, "peers reachable in the stats", func() bool {
		st := engines[0].RegionStats()
		return st[0].Reachable && st[1].Reachable && st[0].Queue == 0 && st[1].Queue == 0
	})

	if err := engines[0].Finish(ctx, first, Outcome{GiveBack: true}); err != nil {
		t.Fatal(err)
	}
	redistest.Eventually(t, "the give-back in every region", func() bool {
		return locals[1].ZCount(ctx, key, "0", "+inf").Val() == 11 && locals[2].ZCount(ctx, key, "0", "+inf").Val() == 11
	})
	engines[0].FinishAsync(second, Outcome{GiveBack: true})
	redistest.Eventually(t, "the asynchronous give-back in every region", func() bool {
		return locals[1].ZCount(ctx, key, "0", "+inf").Val() == 10 && locals[2].ZCount(ctx, key, "0", "+inf").Val() == 10 &&
			locals[0].ZCount(ctx, key, "0", "+inf").Val() == 10
	})

	for _, e := range engines {
		e.Close()
	}
	// Close has waited for them; one may still be returning from its
	// last deferred call.
	redistest.Eventually(t, "no goroutine left after Close", func() bool { return redistest.Goroutines("internal/regions.(*") == 0 })
}

// TestRegionsPartitionSumsToLimit checks the partition bound: with every
// region cut off from the others, each admits its share of a fresh
// subject's limit, ⌊(L + r) / R⌋, and the shares sum to exactly L, never
// R × L; while healing and after, no region admits more, and every region
// ends with all L entries.
func TestRegionsPartitionSumsToLimit(t *testing.T) {
	ctx := context.Background()
	rs, engines, locals := threeRegions(t)
	for i := range engines {
		rs.Cut(i)
	}
	const limit = 31
	req := One("s", rules.User, "fresh", win(limit, time.Minute))
	total := 0
	for i, e := range engines {
		n := 0
		for range limit {
			if d, _ := e.Allow(ctx, req); d.Allowed {
				n++
			}
		}
		if want := (limit + i) / 3; n != want {
			t.Errorf("region %d admitted %d cut off, want its share %d", i, n, want)
		}
		total += n
	}
	if total != limit {
		t.Fatalf("cut off, the regions admitted %d together, want %d", total, limit)
	}
	// Long enough for every region to say it is behind with the others.
	time.Sleep(600 * time.Millisecond)
	for i := range engines {
		rs.Heal(i)
	}
	// While the backlogs cross, acknowledgements make each region's own
	// admissions stable before it may have received the others': it must
	// not take that for room (the catch-up of docs/regions.md).
	for end := time.Now().Add(1500 * time.Millisecond); time.Now().Before(end); {
		for i, e := range engines {
			if d, _ := e.Allow(ctx, req); d.Allowed {
				t.Errorf("region %d admitted beyond the limit while healing", i)
			}
		}
		time.Sleep(2 * time.Millisecond)
	}
	key := string(engines[0].keyer.AppendKeyOf(nil, "s", rules.User, "", "", "fresh", false))
	redistest.Eventually(t, "healed: every entry in every region", func() bool {
		for _, c := range locals {
			if c.ZCount(ctx, key, "0", "+inf").Val() != limit || c.ZCount(ctx, key, "-inf", copiesMax).Val() != 0 {
				return false
			}
		}
		return true
	})
	for i, e := range engines {
		if d, _ := e.Allow(ctx, req); d.Allowed {
			t.Errorf("region %d admitted beyond the limit after healing", i)
		}
	}
}

// TestRegionsReplicateBlock checks that a block started in one region
// reaches the others: their requests for the subject are then denied as
// blocked until the same end, though their windows have room; a
// regional group's block stays in its region.
func TestRegionsReplicateBlock(t *testing.T) {
	ctx := context.Background()
	_, engines, locals := threeRegions(t)
	for _, regional := range []bool{false, true} {
		user := "u-shared"
		if regional {
			user = "u-local"
		}
		req := One("s", rules.User, user, win(10, time.Minute))
		req.Regional = regional
		req.Checks[0].Block = time.Minute
		key := string(engines[0].keyer.AppendKeyOf(nil, "s", rules.User, "", "", user, false))
		// Region ap's window is full (entries its peers never see).
		now := time.Now().UnixMicro()
		for i := range 10 {
			locals[0].ZAdd(ctx, key, redis.Z{Score: float64(now - int64(i)), Member: "x" + string(rune('a'+i))})
		}
		d, err := engines[0].Allow(ctx, req)
		if err != nil || d.Allowed || !d.Blocked {
			t.Fatalf("regional %v: a full window in ap: allowed %v, blocked %v, %v; want a block", regional, d.Allowed, d.Blocked, err)
		}
		end, _ := locals[0].Get(ctx, key+":block").Int64()
		if regional {
			// Give the replicator time to send what it would.
			time.Sleep(200 * time.Millisecond)
			for i := 1; i < 3; i++ {
				if n := locals[i].Exists(ctx, key+":block").Val(); n != 0 {
					t.Errorf("a regional group's block reached region %d", i)
				}
			}
			continue
		}
		redistest.Eventually(t, "the block in every region", func() bool {
			for i := 1; i < 3; i++ {
				if got, _ := locals[i].Get(ctx, key+":block").Int64(); got != end {
					return false
				}
			}
			return true
		})
		if ttl := locals[1].PTTL(ctx, key+":block").Val(); ttl < 50*time.Second || ttl > time.Minute {
			t.Errorf("the peer's block expires in %v, want about a minute", ttl)
		}
		for i := 1; i < 3; i++ {
			d, err := engines[i].Allow(ctx, req)
			if err != nil || d.Allowed || !d.Blocked || d.RetryAfter < 50*time.Second {
				t.Errorf("region %d during ap's block: allowed %v, blocked %v, retry after %v, %v; want blocked for about a minute",
					i, d.Allowed, d.Blocked, d.RetryAfter, err)
			}
		}
	}
}
