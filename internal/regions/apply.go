package regions

import (
	"context"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"
)

// applySrc adds a batch's entries of one key to a peer's count key:
// KEYS[1] the key; ARGV[1] how long its entries must stay (µs); then
// score, member pairs. ZADD of a member already there with its score
// changes nothing, so a batch sent twice is applied once. Entries older
// than the key's retention (the longer of ARGV[1] and the key's own 'r'
// marker, see lua/multi_window.lua) are trimmed, as the key's own
// bookkeeping would, and the key's expiry is extended to cover them,
// never shortened. It replies the number of members added.
const applySrc = `
local key, keep = KEYS[1], tonumber(ARGV[1])
local added, newest = 0, 0
for i = 2, #ARGV, 2 do
  added = added + redis.call('ZADD', key, ARGV[i], ARGV[i + 1])
  local s = tonumber(ARGV[i])
  if s > newest then newest = s end
end
local r = redis.call('ZSCORE', key, 'r')
if r and -tonumber(r) > keep then keep = -tonumber(r) end
redis.call('ZREMRANGEBYSCORE', key, '0', string.format('%d', newest - keep))
local ttl = string.format('%d', math.ceil(keep / 1000) + 1000)
if redis.call('PEXPIRE', key, ttl, 'GT') == 0 then
  redis.call('PEXPIRE', key, ttl, 'NX')
end
return added
`

var applyScript = redis.NewScript(applySrc)

// keyBatch is what one batch changes in one key.
type keyBatch struct {
	key     string
	keep    int64
	add     []any // score, member pairs
	removed []any // members
}

// group groups entries by key, in the order keys first appear.
func group(entries []*pending) []*keyBatch {
	var out []*keyBatch
	at := map[string]*keyBatch{}
	for _, p := range entries {
		e := &p.Entry
		b := at[e.Key]
		if b == nil {
			b = &keyBatch{key: e.Key}
			at[e.Key] = b
			out = append(out, b)
		}
		if e.Remove {
			b.removed = append(b.removed, e.Member)
			continue
		}
		b.keep = max(b.keep, e.Keep)
		b.add = append(b.add, strconv.FormatInt(e.Stamp, 10), e.Member)
	}
	return out
}

// apply sends entries to a peer in one pipeline: a script call per key
// with admissions, a ZREM per key with give-backs (after the admissions:
// a give-back follows its admission). Cluster clients route each command
// to its key's slot. A script the server lacks is sent again in full.
func apply(ctx context.Context, c Client, entries []*pending) error {
	batches := group(entries)
	err := applyWith(ctx, c, batches, false)
	if err != nil && strings.Contains(err.Error(), "NOSCRIPT") {
		err = applyWith(ctx, c, batches, true)
	}
	return err
}

func applyWith(ctx context.Context, c Client, batches []*keyBatch, full bool) error {
	pipe := c.Pipeline()
	for _, b := range batches {
		if len(b.add) > 0 {
			args := append([]any{b.keep}, b.add...)
			if full {
				pipe.Eval(ctx, applySrc, []string{b.key}, args...)
			} else {
				pipe.EvalSha(ctx, applyScript.Hash(), []string{b.key}, args...)
			}
		}
		if len(b.removed) > 0 {
			pipe.ZRem(ctx, b.key, b.removed...)
		}
	}
	cmds, err := pipe.Exec(ctx)
	if err != nil {
		return err
	}
	for _, cmd := range cmds {
		if err := cmd.Err(); err != nil {
			return err
		}
	}
	return nil
}

// stabilize removes acknowledged admissions from the local unstable keys
// (key + suffix), one ZREM per key, in one pipeline.
func stabilize(ctx context.Context, c Client, suffix string, entries []*pending) error {
	at := map[string][]any{}
	var keys []string
	for _, p := range entries {
		k := p.Key + suffix
		if _, ok := at[k]; !ok {
			keys = append(keys, k)
		}
		at[k] = append(at[k], p.Member)
	}
	pipe := c.Pipeline()
	for _, k := range keys {
		pipe.ZRem(ctx, k, at[k]...)
	}
	_, err := pipe.Exec(ctx)
	return err
}
