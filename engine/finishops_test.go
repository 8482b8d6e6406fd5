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
	"github.com/slidelimit/slidelimit/lua"
)

// The tests of this file call the script's finish ops directly (see
// lua/mw_finish.lua), on keys they write by hand, and
// check the keys after each step, on miniredis and on real Redis, where
// they also count the commands each step runs (INFO commandstats).

// stepServer is a server the finish steps run on.
type stepServer struct {
	name string
	c    *redis.Client
	real bool // commandstats can be read
}

func stepServers(t *testing.T) []stepServer {
	t.Helper()
	_, rc := redistest.StartClient(t)
	_, mc := redistest.Mini(t)
	return []stepServer{{"miniredis", mc, false}, {"redis", rc, true}}
}

// onStepServers runs step on each server of stepServers.
func onStepServers(t *testing.T, step func(*testing.T, stepServer)) {
	for _, s := range stepServers(t) {
		t.Run(s.name, func(t *testing.T) { step(t, s) })
	}
}

// finishOp runs one finish op of member over keys, whose fields are
// fields, at the server's time (t 0), and returns the reply after its
// time: the op's code and a flag per key. On real Redis it checks that
// the op ran exactly the commands in want (name: calls) among those it
// counts.
func (s stepServer) finishOp(t *testing.T, member string, keys []string, want map[string]int64, fields ...any) []int64 {
	t.Helper()
	ctx := context.Background()
	if s.real {
		if err := s.c.ConfigResetStat(ctx).Err(); err != nil {
			t.Fatal(err)
		}
	}
	args := append([]any{0, 3, "-" + member, len(keys)}, finishFields(fields)...)
	v, err := s.c.Eval(ctx, lua.Script("multi_window"), keys, args...).Int64Slice()
	if err != nil {
		t.Fatal(err)
	}
	if len(v) < 3 || v[0] != 0 || v[1] != 0 || v[2] != 1 {
		t.Fatalf("reply %v, want time 0 0 (a call of finish ops reads no time) and code 1", v)
	}
	if s.real && want != nil {
		got := readCmdStats(t, s.c)
		for _, cmd := range []string{"time", "zrange", "zpopmax", "zrem", "zadd", "zscore", "hget", "hincrby", "hdel", "publish"} {
			if got[cmd].calls != want[cmd] {
				t.Errorf("%s ran %d times, want %d (all: %v)", cmd, got[cmd].calls, want[cmd], got)
			}
		}
	}
	return v[3:]
}

// finishFields returns the fields of a finish op's keys in the script's
// format from fields in a longer one that names every field: "C" or "S"
// and the suffix; "W", suffix, delta, mode, at, grain and cost; "A" and
// "R" as in the script.
func finishFields(fields []any) []any {
	var out []any
	suffixed := func(kind string, suffix any) string {
		if s := fmt.Sprint(suffix); s != "0" {
			return kind + s
		}
		return kind
	}
	for i := 0; i < len(fields); {
		switch fields[i] {
		case "C", "S":
			out = append(out, suffixed(fields[i].(string), fields[i+1]))
			i += 2
		case "W":
			mode := fields[i+3].(string)
			out = append(out, suffixed(mode, fields[i+1]), fields[i+2], fields[i+4], fields[i+6])
			if mode == "g" {
				out = append(out, fields[i+5])
			}
			i += 7
		case "A":
			out = append(out, fields[i:i+3]...)
			i += 3
		default: // "R"
			out = append(out, fields[i:i+4]...)
			i += 4
		}
	}
	return out
}

// scored returns the members of sorted set key with their scores, in
// rank order, as "member@score".
func scored(t *testing.T, c *redis.Client, key string) []string {
	t.Helper()
	zs, err := c.ZRangeWithScores(context.Background(), key, 0, -1).Result()
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, z := range zs {
		out = append(out, z.Member.(string)+"@"+strconv.FormatInt(int64(z.Score), 10))
	}
	return out
}

// weighted writes weighted key key: markers, then entries given as
// total, name, score.
func weightedKey(t *testing.T, c *redis.Client, key string, entries ...any) {
	t.Helper()
	zs := []redis.Z{{Score: -60_000_000, Member: "r"}, {Score: -(1 << 51) - 1, Member: "e60000000"}}
	for i := 0; i < len(entries); i += 3 {
		name := total16(entries[i].(int)) + ":" + entries[i+1].(string)
		zs = append(zs, redis.Z{Score: float64(entries[i+2].(int)), Member: name})
	}
	if err := c.ZAdd(context.Background(), key, zs...).Err(); err != nil {
		t.Fatal(err)
	}
}

func total16(v int) string {
	s := strconv.Itoa(v)
	for len(s) < 16 {
		s = "0" + s
	}
	return s
}

func wantMembers(t *testing.T, c *redis.Client, key string, want ...string) {
	t.Helper()
	if got := scored(t, c, key); !slices.Equal(got, want) {
		t.Errorf("%s holds %q, want %q", key, got, want)
	}
}

// markers are what weightedKey writes before the entries.
var markers = []string{"e60000000@-2251799813685249", "r@-60000000"}

// TestFinishStepRemove: a count key's entry and a slot key's slot go with
// one ZREM each, the entry announced on the channel, the slot not; a
// second finish changes nothing.
func TestFinishStepRemove(t *testing.T) {
	t.Parallel()
	onStepServers(t, func(t *testing.T, s stepServer) {
		ctx := context.Background()
		p := redistest.Prefix(t)
		count, slots := p+"{u}", p+"{u}:slots"
		s.c.ZAdd(ctx, count, redis.Z{Score: 1000, Member: "m"}, redis.Z{Score: 1001, Member: "n"}, redis.Z{Score: 1002, Member: "o.2"})
		s.c.ZAdd(ctx, slots, redis.Z{Score: 9000, Member: "m"})
		one := map[string]int64{"zrem": 2}
		if got := s.finishOp(t, "m", []string{count, slots}, one, "C", 0, "S", 0); !slices.Equal(got, []int64{1, 1}) {
			t.Errorf("flags %v, want 1 1", got)
		}
		wantMembers(t, s.c, count, "n@1001", "o.2@1002")
		wantMembers(t, s.c, slots)
		if got := s.finishOp(t, "m", []string{count, slots}, one, "C", 0, "S", 0); !slices.Equal(got, []int64{0, 0}) {
			t.Errorf("second finish: flags %v, want 0 0", got)
		}
		// An unknown suffix removes every member the request may have.
		if got := s.finishOp(t, "o", []string{count}, map[string]int64{"zrem": 1}, "C", -1); !slices.Equal(got, []int64{1}) {
			t.Errorf("unknown suffix: flags %v, want 1", got)
		}
		wantMembers(t, s.c, count, "n@1001")
	})
}

// TestFinishStepPublish: the channel hears of the count key that lost an
// entry, not of the slot.
func TestFinishStepPublish(t *testing.T) {
	t.Parallel()
	onStepServers(t, func(t *testing.T, s stepServer) {
		ctx := context.Background()
		p := redistest.Prefix(t)
		count, slots := p+"{u}", p+"{u}:slots"
		s.c.ZAdd(ctx, count, redis.Z{Score: 1000, Member: "m"})
		s.c.ZAdd(ctx, slots, redis.Z{Score: 9000, Member: "m"})
		sub := s.c.Subscribe(ctx, p+"ch")
		defer sub.Close()
		if _, err := sub.Receive(ctx); err != nil {
			t.Fatal(err)
		}
		v, err := s.c.Eval(ctx, lua.Script("multi_window"), []string{count, slots}, 0, 3, "-m", -2, p+"ch", "C", "S").Int64Slice()
		if err != nil || !slices.Equal(v, []int64{0, 0, 1, 1, 1}) {
			t.Fatalf("reply %v, %v", v, err)
		}
		msg, err := sub.ReceiveMessage(ctx)
		if err != nil || msg.Payload != "E"+count {
			t.Errorf("channel got %+v, %v, want E%s", msg, err, count)
		}
	})
}

// TestFinishStepSettleNewest: settling the key's newest entry pops it and
// adds it back renamed with its new total, with no other read; a second
// settlement, and a give-back after it, change nothing.
func TestFinishStepSettleNewest(t *testing.T) {
	t.Parallel()
	onStepServers(t, func(t *testing.T, s stepServer) {
		key := redistest.Prefix(t) + "{u}:w"
		weightedKey(t, s.c, key, 100, "a", 1000, 300, "m", 2000)
		settle := []any{"W", 0, -150, "s", 2000, 0, 200}
		if got := s.finishOp(t, "m", []string{key}, map[string]int64{"zpopmax": 1, "zadd": 1}, settle...); !slices.Equal(got, []int64{1}) {
			t.Errorf("flags %v, want 1", got)
		}
		want := append(slices.Clone(markers), total16(100)+":a@1000", total16(150)+":m!@2000")
		wantMembers(t, s.c, key, want...)
		if got := s.finishOp(t, "m", []string{key}, map[string]int64{"zpopmax": 1, "zadd": 1}, settle...); !slices.Equal(got, []int64{0}) {
			t.Errorf("second settlement: flags %v, want 0", got)
		}
		if got := s.finishOp(t, "m", []string{key}, nil, "W", 0, -200, "r", 2000, 0, 200); !slices.Equal(got, []int64{0}) {
			t.Errorf("give-back after settlement: flags %v, want 0", got)
		}
		wantMembers(t, s.c, key, want...)
		// A debt, to a request admitted alone in its key.
		weightedKey(t, s.c, key, 250, "d", 3000)
		if got := s.finishOp(t, "d", []string{key}, map[string]int64{"zpopmax": 1, "zadd": 1}, "W", 0, 40, "s", 3000, 0, 100); !slices.Equal(got, []int64{1}) {
			t.Errorf("debt: flags %v, want 1", got)
		}
		wantMembers(t, s.c, key, append(want, total16(290)+":d!@3000")...)
	})
}

// TestFinishStepSettleLater: a request with later entries is found by its
// decision time; the later entries carry the change in their totals.
func TestFinishStepSettleLater(t *testing.T) {
	t.Parallel()
	onStepServers(t, func(t *testing.T, s stepServer) {
		key := redistest.Prefix(t) + "{u}:w"
		weightedKey(t, s.c, key, 100, "a", 1000, 300, "m", 2000, 350, "b", 3000)
		// The pop finds b, the read from 2000 on finds m: m is renamed,
		// and b, already removed, is added back with its new total.
		want := map[string]int64{"zpopmax": 1, "zrange": 1, "zrem": 1, "zadd": 2}
		if got := s.finishOp(t, "m", []string{key}, want, "W", 0, -150, "s", 2000, 0, 200); !slices.Equal(got, []int64{1}) {
			t.Errorf("flags %v, want 1", got)
		}
		wantMembers(t, s.c, key, append(slices.Clone(markers),
			total16(100)+":a@1000", total16(150)+":m!@2000", total16(200)+":b@3000")...)
		// A later entry at the same time (b, admitted in the same
		// microsecond) comes after m in rank: the pop finds b, not m.
		same := redistest.Prefix(t) + "{u}:w"
		weightedKey(t, s.c, same, 100, "a", 1000, 300, "m", 2000, 350, "b", 2000)
		if got := s.finishOp(t, "m", []string{same}, want, "W", 0, -150, "s", 2000, 0, 200); !slices.Equal(got, []int64{1}) {
			t.Errorf("flags %v, want 1", got)
		}
		wantMembers(t, s.c, same, append(slices.Clone(markers),
			total16(100)+":a@1000", total16(150)+":m!@2000", total16(200)+":b@2000")...)
		// A debt that would take the newest total above 2^53 is refused,
		// and the popped entry is back as it was.
		big := redistest.Prefix(t) + "{u}:w"
		weightedKey(t, s.c, big, 300, "m", 2000, 9007199254740000, "b", 3000)
		if got := s.finishOp(t, "m", []string{big}, nil, "W", 0, 5000, "s", 2000, 0, 200); !slices.Equal(got, []int64{2}) {
			t.Errorf("debt above 2^53: flags %v, want 2", got)
		}
		wantMembers(t, s.c, big, append(slices.Clone(markers), total16(300)+":m@2000", "9007199254740000:b@3000")...)
	})
}

// TestFinishStepGiveBackWeighted: giving back the newest entry removes it,
// reading the entry before to tell whether it carried more than its cost
// (a debt, or merged requests), which stays as an entry of its own.
func TestFinishStepGiveBackWeighted(t *testing.T) {
	t.Parallel()
	onStepServers(t, func(t *testing.T, s stepServer) {
		key := redistest.Prefix(t) + "{u}:w"
		weightedKey(t, s.c, key, 100, "a", 1000, 300, "m", 2000)
		giveBack := []any{"W", 0, -200, "r", 2000, 0, 200}
		if got := s.finishOp(t, "m", []string{key}, map[string]int64{"zpopmax": 1, "zrange": 1}, giveBack...); !slices.Equal(got, []int64{1}) {
			t.Errorf("flags %v, want 1", got)
		}
		wantMembers(t, s.c, key, append(slices.Clone(markers), total16(100)+":a@1000")...)
		// m weighs 250 (a debt of 50): the 50 stays.
		weightedKey(t, s.c, key, 350, "m", 2000)
		if got := s.finishOp(t, "m", []string{key}, map[string]int64{"zpopmax": 1, "zrange": 1, "zadd": 1}, giveBack...); !slices.Equal(got, []int64{1}) {
			t.Errorf("flags %v, want 1", got)
		}
		wantMembers(t, s.c, key, append(slices.Clone(markers), total16(100)+":a@1000", total16(150)+":-@2000")...)
		// With a later entry (b, settled already), the pop finds b and puts
		// it back; m is found from its decision time on, and b's total
		// loses m's cost, its name kept.
		later := redistest.Prefix(t) + "{u}:w"
		weightedKey(t, s.c, later, 100, "a", 1000, 300, "m", 2000, 320, "b!", 3000)
		want := map[string]int64{"zpopmax": 1, "zrange": 2, "zrem": 2, "zadd": 2}
		if got := s.finishOp(t, "m", []string{later}, want, giveBack...); !slices.Equal(got, []int64{1}) {
			t.Errorf("flags %v, want 1", got)
		}
		wantMembers(t, s.c, later, append(slices.Clone(markers), total16(100)+":a@1000", total16(120)+":b!@3000")...)
	})
}

// TestFinishStepCalendar: a calendar settlement or give-back records its
// member (HSETNX, so that a retry runs once) and is one HINCRBY, which
// also says what the period held: never below 0 (the field goes at 0), and
// a period without a field (over) is left without one and without a
// record, a key it made deleted.
func TestFinishStepCalendar(t *testing.T) {
	t.Parallel()
	onStepServers(t, func(t *testing.T, s stepServer) {
		ctx := context.Background()
		key := redistest.Prefix(t) + "{u}:cal:d"
		s.c.HSet(ctx, key, "1000", 5)
		s.c.PExpire(ctx, key, time.Hour)
		applied := map[string]int64{"hsetnx": 1, "hincrby": 1, "hset": 1}
		if got := s.finishOp(t, "m1", []string{key}, applied, "A", 1000, -2); !slices.Equal(got, []int64{1}) {
			t.Errorf("refund: flags %v, want 1", got)
		}
		if v, _ := s.c.HGet(ctx, key, "1000").Result(); v != "3" {
			t.Errorf("count %q, want 3", v)
		}
		if ttl := s.c.PTTL(ctx, key).Val(); ttl <= 0 {
			t.Errorf("expiry %v after a refund, want kept", ttl)
		}
		if got := s.finishOp(t, "m1", []string{key}, map[string]int64{"hsetnx": 1}, "A", 1000, -2); !slices.Equal(got, []int64{0}) {
			t.Errorf("the same member again: flags %v, want 0", got)
		}
		if got := s.finishOp(t, "m2", []string{key}, applied, "A", 1000, 4); !slices.Equal(got, []int64{1}) {
			t.Errorf("debt: flags %v, want 1", got)
		}
		if v, _ := s.c.HGet(ctx, key, "1000").Result(); v != "7" {
			t.Errorf("count %q after the debt, want 7", v)
		}
		if got := s.finishOp(t, "m3", []string{key}, map[string]int64{"hsetnx": 1, "hincrby": 1, "hdel": 1, "hset": 1}, "A", 1000, -10); !slices.Equal(got, []int64{1}) {
			t.Errorf("refund to below 0: flags %v, want 1", got)
		}
		if n := s.c.HExists(ctx, key, "1000").Val(); n {
			t.Errorf("the count of a period at 0 exists, want gone")
		}
		fresh := redistest.Prefix(t) + "{u}:cal:d"
		if got := s.finishOp(t, "m4", []string{fresh}, map[string]int64{"hsetnx": 1, "hincrby": 1, "hdel": 1}, "A", 1000, 3); !slices.Equal(got, []int64{0}) {
			t.Errorf("debt to a period without a field: flags %v, want 0", got)
		}
		if n := s.c.Exists(ctx, fresh).Val(); n != 0 {
			t.Errorf("a debt to a period without a field made the key, want none")
		}
	})
}

// TestFinishStepRestore: a distinct value counted anew by a rolled-back
// admission gets its old score back, or goes, only while its score is
// still that admission's.
func TestFinishStepRestore(t *testing.T) {
	t.Parallel()
	onStepServers(t, func(t *testing.T, s stepServer) {
		ctx := context.Background()
		key := redistest.Prefix(t) + "{u}:d"
		s.c.ZAdd(ctx, key, redis.Z{Score: 2000, Member: "v:a"}, redis.Z{Score: 2000, Member: "v:b"})
		if got := s.finishOp(t, "m", []string{key}, map[string]int64{"zscore": 1, "zadd": 1}, "R", "v:a", 2000, 500); !slices.Equal(got, []int64{1}) {
			t.Errorf("flags %v, want 1", got)
		}
		if got := s.finishOp(t, "m", []string{key}, map[string]int64{"zscore": 1, "zrem": 1}, "R", "v:b", 2000, 1); !slices.Equal(got, []int64{1}) {
			t.Errorf("flags %v, want 1", got)
		}
		if got := s.finishOp(t, "m", []string{key}, map[string]int64{"zscore": 1}, "R", "v:a", 2000, 1); !slices.Equal(got, []int64{0}) {
			t.Errorf("counted since: flags %v, want 0", got)
		}
		wantMembers(t, s.c, key, "v:a@500")
	})
}
