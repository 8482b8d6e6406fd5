package engine

import (
	"context"
	"math/rand/v2"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/slidelimit/slidelimit/internal/redistest"
	"github.com/slidelimit/slidelimit/rules"
)

// TestSharedOpsDeriveExactly runs random batches twice, each in its own
// key space: once with the ops that share a key marked (see sharing), so
// that the script derives the later ops' windows from the earlier ones',
// and once unmarked, so that it reads every window. The replies, the
// stored entries and the expiries must be the same, and the marked runs
// must have read less.
func TestSharedOpsDeriveExactly(t *testing.T) {
	t.Parallel()
	_, rc := redistest.StartClient(t)
	e := newEngine(t, rc)
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(11, 12))

	// Windows are the same for a subject most of the time, so that ops
	// sharing a key mostly have the same periods; most limits are small, so
	// that windows fill and some derived ops must read their edge after
	// all, and d's are large, so that its windows still have room after the
	// clock went back.
	windows := func(subject string) []rules.Window {
		if rng.IntN(5) == 0 {
			return []rules.Window{win(1+rng.Int64N(6), time.Duration(1+rng.IntN(20))*time.Second)}
		}
		switch subject {
		case "a":
			return []rules.Window{win(6, time.Minute), win(3, time.Second)}
		case "b":
			return []rules.Window{win(40, time.Hour), win(9, 10*time.Second), win(4, time.Second)}
		case "d":
			return []rules.Window{win(500, time.Minute), win(100, time.Second)}
		}
		return []rules.Window{win(5, 30*time.Second)}
	}
	randomRequest := func() Request {
		var checks []Check
		for _, s := range []string{"a", "b", "c", "d"} {
			if rng.IntN(2) == 0 {
				checks = append(checks, user(s, windows(s)...))
			}
		}
		if len(checks) == 0 || rng.IntN(6) == 0 {
			// A weighted key in a marked op is read in full and forgotten.
			checks = append(checks, Check{Rule: rules.Rule{Kind: rules.IP, Cost: "bytes", Windows: []rules.Window{win(50, time.Minute)}}, Subject: "w", Cost: 1 + rng.Int64N(9)})
		}
		return req(checks...)
	}
	prefixes := [2]string{redistest.Prefix(t), redistest.Prefix(t)}
	var zcounts [2]int64
	marked := 0
	now := redistest.Epoch.UnixMicro()
	for it := range 400 {
		now += rng.Int64N(2_000_000)
		if rng.IntN(8) == 0 {
			now -= rng.Int64N(6_000_000) // the clock went back
		}
		reqs := make([]Request, 2+rng.IntN(6))
		members := make([]string, len(reqs))
		for i := range reqs {
			reqs[i] = randomRequest()
			if rng.IntN(6) != 0 {
				members[i] = strconv.Itoa(rng.IntN(30)) // some collide
			}
		}
		var replies [2][]int64
		for side, prefix := range prefixes {
			batch := make([]*call, len(reqs))
			for i := range reqs {
				c := &call{mode: opPeek}
				if members[i] != "" {
					c.mode, c.member = opAllow, []byte(members[i])
				}
				if err := buildPlan(&c.plan, newKeyer(&config{prefix: prefix}), &reqs[i]); err != nil {
					t.Fatal(err)
				}
				c.prepare()
				batch[i] = c
			}
			var shared []bool
			if side == 0 {
				shared = batch[0].sharing(batch)
				for _, s := range shared {
					if s {
						marked++
					}
				}
			}
			before := zcountCalls(t, rc)
			v, err := e.evalInts(ctx, e.scriptArgs(batch[0], batch, now, shared))
			if err != nil {
				t.Fatalf("call %d: %v", it, err)
			}
			replies[side] = v
			zcounts[side] += zcountCalls(t, rc) - before
		}
		if !reflect.DeepEqual(replies[0], replies[1]) {
			t.Fatalf("call %d (%d ops, marked %v): replies differ\nmarked   %v\nunmarked %v", it, len(reqs), prefixes, replies[0], replies[1])
		}
		for _, k := range scanKeys(t, rc, prefixes[0]) {
			other := prefixes[1] + strings.TrimPrefix(k, prefixes[0])
			a := rc.ZRangeWithScores(ctx, k, 0, -1).Val()
			b := rc.ZRangeWithScores(ctx, other, 0, -1).Val()
			if !reflect.DeepEqual(a, b) {
				t.Fatalf("call %d: key %s holds\n%v\nunmarked\n%v", it, k, a, b)
			}
			da, db := rc.PTTL(ctx, k).Val(), rc.PTTL(ctx, other).Val()
			if (da < 0) != (db < 0) || (da-db).Abs() > time.Second {
				t.Fatalf("call %d: key %s expires in %v, unmarked in %v", it, k, da, db)
			}
		}
	}
	if marked == 0 || zcounts[0] >= zcounts[1] {
		t.Errorf("marked ops: %d; ZCOUNT calls marked %d, unmarked %d: the marked runs should read less", marked, zcounts[0], zcounts[1])
	}
	t.Logf("marked ops: %d; ZCOUNT calls marked %d, unmarked %d", marked, zcounts[0], zcounts[1])
}

// zcountCalls returns how many ZCOUNT commands the server has run.
func zcountCalls(t *testing.T, rc *redis.Client) int64 {
	t.Helper()
	return redistest.CommandStats(t, rc)["zcount"].Calls
}
