package regions

import (
	"context"
	"errors"
	"iter"
	"slices"
	"strings"

	"github.com/redis/go-redis/v9"
)

// applySrc applies a batch's entries to a peer's count keys and block
// keys, KEYS[1..m]; ARGV holds four fields per key, in order.
//
// A count key's are keep (how long its entries must stay, µs, positive),
// na, nr and floor, then na score, member pairs to add and nr members to
// remove (give-backs, after the admissions: a give-back follows its
// admission). A floor above 0 is a reset (see Entry.Reset), applied
// first: the key's entries stamped at or before it and the copies of
// such entries leave (two ZREMRANGEBYSCORE), and the key keeps the latest
// floor it has seen as the marker 'f' scored -floor (ZADD LT), which no
// window counts and no trim removes, with an expiry of keep when the key
// had none (a key made for it). The pairs stamped at or before the key's
// floor are then dropped, wherever it came from. ZADD of a member already
// there with its score, and ZREM of one already gone, change nothing, so
// a batch sent twice is applied once.
//
// Bookkeeping runs once per epoch of the key, as the engine's own does
// (Epochs in lua/multi_window.lua): an epoch lasts an eighth of keep, and
// the marker 'p' and that length (keep's text in ARGV names it), scored
// -(EPOCH + floor(newest / length)), newest the batch's latest stamp,
// says which epoch the key's bookkeeping last ran in. In another epoch,
// entries older than the key's retention (the longer of keep and the
// key's own 'r' marker) are trimmed and the key's expiry is extended to
// retention + epoch + 1 s, never shortened (GT; a key without an expiry
// gets it with NX): every batch of the epoch is stamped before its end,
// so each entry outlives its retention by the peer's clock, within a
// second of skew. A key with neither 'r' nor a marker is new (every key
// the engine admits into has 'r', every key a batch added to has its
// marker): it gets its expiry and no trim. Stale entries stay at most an
// epoch past the retention; a trim is memory's, never a window's (no
// window counts an entry older than its period). The members go in one
// ZADD per 256 pairs (unpack's stack), the marker with the first: per
// key and batch with entries, 2 calls within an epoch (ZMSCORE reads 'r',
// 'f' and the marker at once), 3 for a new key, 4 to 5 at an epoch's
// start, and 4 more for a reset. The helpers of floors and blocks are
// made only when a batch needs them (help).
//
// A block key's (see Blocks in lua/multi_window.lua) are -end, since,
// hold and floor: end is the time the latest block of the batch ends and
// since the time it started (µs since 1970, by the deciding region's
// clock; end 1 when the batch has no block), floor a reset's floor (0:
// none) and hold the reset's block length. The key holds a block's end,
// expiring with it by the peer's TIME, or, after a reset, -floor for as
// long as a block started at or before the floor may last (floor + hold):
// a reset replaces an end no later than floor + hold (the block started
// at or before the floor) with -floor, and keeps a later one. A block
// then applies when it started after the key's floor and ends after the
// end the key holds, and has not ended. It replies the number of members
// added.
const applySrc = `
-- COPY (2^52) and EPOCH (2^51) as lua/lua.go declares them.
local COPY, EPOCH = 4503599627370496, 2251799813685248
local H = nil
-- help returns the helpers of floors and blocks, made on first use: a
-- batch of admissions alone makes no closure.
local function help()
  if H then return H end
  H = {}
  function H.num(s)
    if not s then return nil end
    return tonumber(s) or tonumber((string.gsub(s, '^(-?%d+)([eE])', '%1.0%2')))
  end
  function H.clock()
    local now = redis.call('TIME')
    return tonumber(now[1]) * 1000000 + tonumber(now[2])
  end
  function H.set(key, v, ends, now)
    redis.call('SET', key, string.format('%d', v), 'PX', string.format('%d', math.ceil((ends - now) / 1000)))
  end
  function H.block(key, ends, since, floor, hold)
    local held = H.num(redis.call('GET', key)) or 0
    local below, now = 0, nil
    if held < 0 then
      below, held = -held, 0
    end
    if floor > below and held <= floor + hold then
      below, held, now = floor, 0, H.clock()
      if floor + hold > now then
        H.set(key, -floor, floor + hold, now)
      end
    end
    if ends > held and since > below then
      now = now or H.clock()
      if ends > now then
        H.set(key, ends, ends, now)
      end
    end
  end
  function H.reset(key, floor, keep)
    redis.call('ZREMRANGEBYSCORE', key, '0', string.format('%d', floor))
    redis.call('ZREMRANGEBYSCORE', key, string.format('%d', -(COPY + floor)), string.format('(%d', -COPY))
    redis.call('ZADD', key, 'LT', string.format('%d', -floor), 'f')
    redis.call('PEXPIRE', key, string.format('%d', math.ceil(keep / 1000)), 'NX')
  end
  -- after returns the pairs of ARGV[p..p+2na-1] stamped after below.
  function H.after(p, na, below)
    local out = {}
    for i = 0, na - 1 do
      if tonumber(ARGV[p + 2 * i]) > below then
        out[#out + 1] = ARGV[p + 2 * i]
        out[#out + 1] = ARGV[p + 2 * i + 1]
      end
    end
    return out
  end
  return H
end
local p, added = 1, 0
-- Memos, as the engine's (Cost in lua/multi_window.lua): per keep's text
-- {keep, epoch length, marker, expiry's text}; per epoch, its score's text.
local kinds, epochs = {}, {}
for k = 1, #KEYS do
  local key, keep_s, x_s, y_s, floor_s = KEYS[k], ARGV[p], ARGV[p + 1], ARGV[p + 2], ARGV[p + 3]
  p = p + 4
  local kind = kinds[keep_s]
  if not kind then
    local keep = tonumber(keep_s)
    local len = math.ceil(keep / 8)
    kind = {keep, len, 'p' .. len, string.format('%d', math.ceil((keep + len) / 1000) + 1000)}
    kinds[keep_s] = kind
  end
  local keep = kind[1]
  if keep < 0 then
    help().block(key, -keep, tonumber(x_s), tonumber(floor_s), tonumber(y_s))
  else
    -- A batch's fields are mostly 1, 0 and 0: compared, not parsed.
    local na, nr, floor = 1, 0, 0
    if x_s ~= '1' then na = tonumber(x_s) end
    if y_s ~= '0' then nr = tonumber(y_s) end
    if floor_s ~= '0' then floor = tonumber(floor_s) end
    if floor > 0 then
      help().reset(key, floor, keep)
    end
    if na > 0 then
      local newest = tonumber(ARGV[p])
      for i = 1, na - 1 do
        local s = tonumber(ARGV[p + 2 * i])
        if s > newest then newest = s end
      end
      local len, marker = kind[2], kind[3]
      local epoch = -(EPOCH + math.floor(newest / len))
      local epoch_s = epochs[epoch]
      if not epoch_s then
        epoch_s = string.format('%d', epoch)
        epochs[epoch] = epoch_s
      end
      local got = redis.call('ZMSCORE', key, 'r', 'f', marker)
      local r, f, e = got[1], got[2], got[3]
      local book = not (e and (e == epoch_s or tonumber(e) == epoch))
      local src, q, m = ARGV, p, na
      if f then
        src, q = help().after(p, na, -help().num(f)), 1
        m = #src / 2
      end
      local i = 0
      if book then
        -- The epoch's marker goes with the first pairs.
        local j = math.min(m, 255)
        added = added - (e and 0 or 1) + redis.call('ZADD', key, epoch_s, marker, unpack(src, q, q + 2 * j - 1))
        i = j
      end
      for i = i, m - 1, 256 do
        local j = math.min(m, i + 256)
        added = added + redis.call('ZADD', key, unpack(src, q + 2 * i, q + 2 * j - 1))
      end
      if book then
        r = r and (tonumber(r) or help().num(r))
        local ttl = kind[4]
        if r and -r > keep then
          keep = -r
          ttl = string.format('%d', math.ceil((keep + len) / 1000) + 1000)
        end
        if not r and not e then
          -- A new key: nothing to trim.
          if redis.call('PEXPIRE', key, ttl, 'NX') == 0 then
            redis.call('PEXPIRE', key, ttl, 'GT')
          end
        else
          redis.call('ZREMRANGEBYSCORE', key, '0', string.format('%d', newest - keep))
          if redis.call('PEXPIRE', key, ttl, 'GT') == 0 then
            redis.call('PEXPIRE', key, ttl, 'NX')
          end
        end
      end
    end
    p = p + 2 * na
    for i = 1, nr do
      redis.call('ZREM', key, ARGV[p])
      p = p + 1
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

// script is a script's source and its SHA-1, for EVALSHA.
type script struct{ src, hash string }

func newScript(src string) script { return script{src: src, hash: redis.NewScript(src).Hash()} }

var (
	applyScript  = newScript(applySrc)
	stableScript = newScript(stableSrc)
)

// keyBatch is what one batch changes in one key: its fields, and its
// entries as a list through the batch (first, last; see calls).
type keyBatch struct {
	keep        int64 // a count key's; a block key's latest end, negated
	since       int64 // a block key's latest block's start
	floor       int64 // the latest reset's floor
	hold        int64 // a block key's reset: its block length
	na, nr      int   // admissions and give-backs
	block       bool
	first, last int32
}

// merge adds e's change to b.
func (b *keyBatch) merge(e *Entry) {
	b.block = b.block || e.Block
	switch {
	case e.Remove:
		b.nr++
	case e.Reset:
		if e.Stamp > b.floor {
			b.floor = e.Stamp
		}
		if e.Block {
			b.hold = max(b.hold, e.Keep)
		} else {
			b.keep = max(b.keep, e.Keep)
		}
	case e.Block:
		if -e.Stamp < b.keep { // the latest end
			b.keep, b.since = -e.Stamp, e.Stamp-e.Keep
		}
	default:
		b.keep = max(b.keep, e.Keep)
		b.na++
	}
}

// call is one script call: args holds 3 places for the command, the
// script and nkeys (see runWith), then the keys, then the arguments.
type call struct {
	nkeys int
	args  []any
}

// calls turns entries into the script calls of applySrc: their keys in
// the order they first appear, grouped by hash tag when byTag. It boxes
// nothing an entry has boxed already (see pending.wire).
func calls(entries []*pending, byTag bool) []call {
	at := make(map[string]int32, len(entries))
	bs := make([]keyBatch, 0, len(entries))
	next := make([]int32, len(entries)) // the key's next entry, -1 after its last
	for i, p := range entries {
		next[i] = -1
		j, ok := at[p.Key]
		if !ok {
			j = int32(len(bs))
			at[p.Key] = j
			bs = append(bs, keyBatch{first: int32(i), last: int32(i)})
		} else {
			next[bs[j].last], bs[j].last = int32(i), int32(i)
		}
		bs[j].merge(&p.Entry)
	}
	order := make([]int32, len(bs))
	for j := range order {
		order[j] = int32(j)
	}
	var out []call
	var keepV int64
	var keepA any
	box := func(v int64) any { // most of a batch's keys share one keep
		if keepA == nil || v != keepV {
			keepV, keepA = v, v
		}
		return keepA
	}
	for _, group := range groups(order, byTag, func(j int32) string { return entries[bs[j].first].Key }) {
		n := 3 + len(group)*5
		for _, j := range group {
			n += 2*bs[j].na + bs[j].nr
		}
		x := call{nkeys: len(group), args: make([]any, 3, n)}
		for _, j := range group {
			x.args = append(x.args, entries[bs[j].first].wire().key)
		}
		for _, j := range group {
			b := &bs[j]
			if b.block {
				x.args = append(x.args, box(min(b.keep, -1)), b.since, b.hold, b.floor)
				continue
			}
			x.args = append(x.args, box(b.keep), b.na, b.nr, b.floor)
			for i := b.first; i >= 0; i = next[i] {
				if e := entries[i]; !e.Remove && !e.Reset && !e.Block {
					w := e.wire()
					x.args = append(x.args, w.stamp, w.member) // go-redis writes an int64 in decimal
				}
			}
			for i := b.first; i >= 0; i = next[i] {
				if e := entries[i]; e.Remove {
					x.args = append(x.args, e.wire().member)
				}
			}
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
// empty, then pub unless it is nil, and reports whether flag was set; a
// script the server lacks is sent again in full.
func run(ctx context.Context, c Client, s script, cs []call, flag string, pub []any) (bool, error) {
	set, err := runWith(ctx, c, s, cs, false, flag, pub)
	if err != nil && strings.Contains(err.Error(), "NOSCRIPT") {
		set, err = runWith(ctx, c, s, cs, true, flag, pub)
	}
	return set, err
}

func runWith(ctx context.Context, c Client, s script, cs []call, full bool, flag string, pub []any) (bool, error) {
	pipe := c.Pipeline()
	for _, x := range cs {
		x.args[0], x.args[1], x.args[2] = "evalsha", s.hash, x.nkeys
		if full {
			x.args[0], x.args[1] = "eval", s.src
		}
		cmd := redis.NewCmd(ctx, x.args...)
		cmd.SetFirstKeyPos(3) // a cluster client routes by the first key
		_ = pipe.Process(ctx, cmd)
	}
	var get *redis.StringCmd
	if flag != "" {
		get = pipe.Get(ctx, flag)
	}
	if pub != nil {
		pipe.Do(ctx, pub...)
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

// apply sends entries to a peer (see applySrc) in one pipeline, at most
// per script call entries (0: all in one per hash tag), none to only read
// its flag, and reports whether the peer's flag (see BehindKey) was set.
// When entries hold resets of count keys and inval is not nil, the same
// pipeline ends with the command inval returns for their keys (a PUBLISH
// that makes the peer's processes forget what they cached of them).
func apply(ctx context.Context, c Client, entries []*pending, per int, flag string, inval Invalidation) (bool, error) {
	var pub []any
	if inval != nil {
		var keys []string
		for _, p := range entries {
			if p.Reset && !p.Block {
				keys = append(keys, p.Key)
			}
		}
		if len(keys) > 0 {
			pub = inval(keys)
		}
	}
	var cs []call
	for chunk := range chunks(entries, per) {
		cs = append(cs, calls(chunk, byTag(c))...)
	}
	return run(ctx, c, applyScript, cs, flag, pub)
}

// chunks yields entries in slices of at most per entries (all at once
// when per is 0): a script call blocks its server for as long as it runs,
// so a round trip's entries go in several.
func chunks(entries []*pending, per int) iter.Seq[[]*pending] {
	if per <= 0 {
		per = max(len(entries), 1)
	}
	return slices.Chunk(entries, per)
}

// CopyPrefix starts the member of an admission's copy in its count key:
// the region keeps one, scored below every entry, until every peer has
// acknowledged the admission (see Regions in lua/multi_window.lua).
const CopyPrefix = "u"

// stabilize removes the copies of acknowledged admissions from the local
// count keys, in one pipeline of script calls (see stableSrc), one per
// hash tag and per entries of at most per (0: no limit).
func stabilize(ctx context.Context, c Client, entries []*pending, per int) error {
	var out []call
	for chunk := range chunks(entries, per) {
		var keys []string
		members := make(map[string][]any, len(chunk))
		for _, p := range chunk {
			k := p.Key
			if _, ok := members[k]; !ok {
				keys = append(keys, k)
			}
			members[k] = append(members[k], CopyPrefix+p.Member)
		}
		for _, group := range groups(keys, byTag(c), func(k string) string { return k }) {
			x := call{nkeys: len(group), args: make([]any, 3, 3+2*len(group)+len(chunk))}
			for _, k := range group {
				x.args = append(x.args, k)
			}
			for _, k := range group {
				x.args = append(x.args, len(members[k]))
				x.args = append(x.args, members[k]...)
			}
			out = append(out, x)
		}
	}
	_, err := run(ctx, c, stableScript, out, "", nil)
	return err
}

// groups groups items, in order, into the items of script calls: one
// per hash tag of key(item) when byTag (a cluster's keys must share a
// slot), else one.
func groups[T any](items []T, byTag bool, key func(T) string) [][]T {
	if len(items) == 0 {
		return nil
	}
	if !byTag {
		return [][]T{items}
	}
	var out [][]T
	at := map[string]int{}
	for _, it := range items {
		tag := hashTag(key(it))
		i, ok := at[tag]
		if !ok {
			i = len(out)
			at[tag] = i
			out = append(out, nil)
		}
		out[i] = append(out[i], it)
	}
	return out
}
