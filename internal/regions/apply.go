package regions

import (
	"context"
	"errors"
	"strings"

	"github.com/redis/go-redis/v9"
)

// applySrc applies a batch's entries to a peer's count keys and block
// keys, KEYS[1..m]. ARGV holds, per key in order: keep (how long its
// entries must stay, µs), na and nr, then na score, member pairs to add
// and nr members to remove (give-backs, after the admissions: a give-back
// follows its admission). A block key's keep is negative: -keep is the
// time its block ends (µs since 1970, by the deciding region's clock),
// which the key then holds, expiring with it by the peer's TIME, unless
// it holds a later end or the end has passed; its na and nr are 0.
// ZADD of a member already there with its score, and ZREM of one already
// gone, change nothing, so a batch sent twice is applied once. Entries
// older than the key's retention (the longer of keep and the key's own
// 'r' marker, see lua/multi_window.lua) are trimmed, as the key's own
// bookkeeping would, and the key's expiry is extended to cover them,
// never shortened (GT; a key without an expiry, one the batch made or
// that lost it, gets one with NX). The members go in one ZADD per 256
// pairs (unpack's stack): 4 calls per key and batch, whatever its
// entries. It replies the number of members added.
const applySrc = `
local p, added = 1, 0
for k = 1, #KEYS do
  local key, keep, na, nr = KEYS[k], tonumber(ARGV[p]), tonumber(ARGV[p + 1]), tonumber(ARGV[p + 2])
  p = p + 3
  if keep < 0 then
    local now = redis.call('TIME')
    local left = -keep - (tonumber(now[1]) * 1000000 + tonumber(now[2]))
    local held = tonumber(redis.call('GET', key) or '0') or 0
    if left > 0 and -keep > held then
      redis.call('SET', key, string.format('%d', -keep), 'PX', string.format('%d', math.ceil(left / 1000)))
    end
  end
  local newest = 0
  for i = 0, na - 1 do
    local s = tonumber(ARGV[p + 2 * i])
    if s > newest then newest = s end
  end
  for i = 0, na - 1, 256 do
    local j = math.min(na, i + 256)
    added = added + redis.call('ZADD', key, unpack(ARGV, p + 2 * i, p + 2 * j - 1))
  end
  p = p + 2 * na
  for i = 1, nr do
    redis.call('ZREM', key, ARGV[p])
    p = p + 1
  end
  if na > 0 then
    local r = redis.call('ZSCORE', key, 'r')
    if r and -tonumber(r) > keep then
      keep = -tonumber(r)
    end
    local ttl = string.format('%d', math.ceil(keep / 1000) + 1000)
    redis.call('ZREMRANGEBYSCORE', key, '0', string.format('%d', newest - keep))
    if redis.call('PEXPIRE', key, ttl, 'GT') == 0 then
      redis.call('PEXPIRE', key, ttl, 'NX')
    end
  end
end
return added
`

// stableSrc removes the copies of acknowledged entries from count keys,
// KEYS[1..m]: ARGV holds, per key, a count n and n copies' members,
// removed in one ZREM per 512 members (unpack's stack).
const stableSrc = `
local p = 1
for k = 1, #KEYS do
  local n = tonumber(ARGV[p])
  for i = 1, n, 512 do
    redis.call('ZREM', KEYS[k], unpack(ARGV, p + i, p + math.min(n, i + 511)))
  end
  p = p + n + 1
end
return 0
`

var (
	applyScript  = redis.NewScript(applySrc)
	stableScript = redis.NewScript(stableSrc)
)

// keyBatch is what one batch changes in one key.
type keyBatch struct {
	keep    int64
	add     []any // score, member pairs
	removed []any // members
}

// call is one script call: its keys and arguments.
type call struct {
	keys []string
	args []any
}

// calls turns entries into the script calls of applySrc: their keys in
// the order they first appear, grouped by hash tag when byTag.
func calls(entries []*pending, byTag bool) []call {
	var keys []string
	at := map[string]*keyBatch{}
	for _, p := range entries {
		e := &p.Entry
		b := at[e.Key]
		if b == nil {
			b = &keyBatch{}
			at[e.Key] = b
			keys = append(keys, e.Key)
		}
		if e.Remove {
			b.removed = append(b.removed, e.Member)
			continue
		}
		if e.Block {
			b.keep = min(b.keep, -e.Stamp) // the latest end
			continue
		}
		b.keep = max(b.keep, e.Keep)
		b.add = append(b.add, e.Stamp, e.Member) // go-redis writes an int64 in decimal
	}
	var out []call
	for _, group := range groupKeys(keys, byTag) {
		var x call
		for _, k := range group {
			b := at[k]
			x.keys = append(x.keys, k)
			x.args = append(x.args, b.keep, len(b.add)/2, len(b.removed))
			x.args = append(x.args, b.add...)
			x.args = append(x.args, b.removed...)
		}
		out = append(out, x)
	}
	return out
}

// hashTag returns the part of key Redis Cluster hashes: the text between
// its first '{' and the next '}', when not empty, else the whole key.
func hashTag(key string) string {
	if i := strings.IndexByte(key, '{'); i >= 0 {
		if j := strings.IndexByte(key[i+1:], '}'); j > 0 {
			return key[i+1 : i+1+j]
		}
	}
	return key
}

// byTag reports whether c's keys must be grouped by hash tag: any client
// but a single server's may spread keys over servers.
func byTag(c Client) bool {
	_, single := c.(*redis.Client)
	return !single
}

// run runs s's calls in one pipeline, with a GET of flag unless it is
// empty, and reports whether flag was set; a script the server lacks is
// sent again in full.
func run(ctx context.Context, c Client, s *redis.Script, cs []call, flag string) (bool, error) {
	set, err := runWith(ctx, c, s, cs, false, flag)
	if err != nil && strings.Contains(err.Error(), "NOSCRIPT") {
		set, err = runWith(ctx, c, s, cs, true, flag)
	}
	return set, err
}

func runWith(ctx context.Context, c Client, s *redis.Script, cs []call, full bool, flag string) (bool, error) {
	pipe := c.Pipeline()
	for _, x := range cs {
		if full {
			s.Eval(ctx, pipe, x.keys, x.args...)
		} else {
			s.EvalSha(ctx, pipe, x.keys, x.args...)
		}
	}
	var get *redis.StringCmd
	if flag != "" {
		get = pipe.Get(ctx, flag)
	}
	cmds, err := pipe.Exec(ctx)
	if err != nil && !errors.Is(err, redis.Nil) {
		return false, err
	}
	for _, cmd := range cmds {
		if err := cmd.Err(); err != nil && !errors.Is(err, redis.Nil) {
			return false, err
		}
	}
	return get != nil && get.Val() != "", nil
}

// apply sends entries to a peer (see applySrc), none to only read its
// flag, and reports whether the peer's flag (see BehindKey) was set.
func apply(ctx context.Context, c Client, entries []*pending, flag string) (bool, error) {
	return run(ctx, c, applyScript, calls(entries, byTag(c)), flag)
}

// CopyPrefix starts the member of an admission's copy in its count key:
// the region keeps one, scored below every entry, until every peer has
// acknowledged the admission (see Regions in lua/multi_window.lua).
const CopyPrefix = "u"

// stabilize removes the copies of acknowledged admissions from the local
// count keys, in one script call per hash tag (see stableSrc).
func stabilize(ctx context.Context, c Client, entries []*pending) error {
	var keys []string
	members := map[string][]any{}
	for _, p := range entries {
		k := p.Key
		if _, ok := members[k]; !ok {
			keys = append(keys, k)
		}
		members[k] = append(members[k], CopyPrefix+p.Member)
	}
	var out []call
	for _, group := range groupKeys(keys, byTag(c)) {
		var x call
		for _, k := range group {
			x.keys = append(x.keys, k)
			x.args = append(x.args, len(members[k]))
			x.args = append(x.args, members[k]...)
		}
		out = append(out, x)
	}
	_, err := run(ctx, c, stableScript, out, "")
	return err
}

// groupKeys groups keys, in order, into the keys of script calls: one per
// hash tag when byTag (a cluster's keys must share a slot), else one.
func groupKeys(keys []string, byTag bool) [][]string {
	if len(keys) == 0 {
		return nil
	}
	if !byTag {
		return [][]string{keys}
	}
	var out [][]string
	at := map[string]int{}
	for _, k := range keys {
		tag := hashTag(k)
		i, ok := at[tag]
		if !ok {
			i = len(out)
			at[tag] = i
			out = append(out, nil)
		}
		out[i] = append(out[i], k)
	}
	return out
}
