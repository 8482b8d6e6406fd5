package regions

import (
	"context"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"
)

// resetSrc resets a shared count key, KEYS[1], in the deciding region and
// returns the reset's floor: the region's TIME (µs). ARGV[1] is keep, the
// key's longest window (µs), ARGV[2] the block length of KEYS[2], its
// block key (µs, 0: none). The count key is deleted with its entries and
// copies, as a reset without regions deletes it, and made again holding
// only the marker 'f' scored -floor, for the longer of keep and the
// retention its 'r' marker held: a peer's entry stamped at or before the
// floor that arrives later is then dropped here too (see applySrc). The
// block key is lifted: with a block length it holds -floor for that long
// (a peer's block that started at or before the floor is dropped), else
// it is deleted. 6 calls; one more without a block.
const resetSrc = `
local now = redis.call('TIME')
local floor = tonumber(now[1]) * 1000000 + tonumber(now[2])
local keep, hold = tonumber(ARGV[1]), tonumber(ARGV[2])
local r = redis.call('ZSCORE', KEYS[1], 'r')
r = r and tonumber((string.gsub(r, '^(-?%d+)([eE])', '%1.0%2')))
if r and -r > keep then
  keep = -r
end
redis.call('DEL', KEYS[1])
redis.call('ZADD', KEYS[1], string.format('%d', -floor), 'f')
redis.call('PEXPIRE', KEYS[1], string.format('%d', math.ceil(keep / 1000)))
if hold > 0 then
  redis.call('SET', KEYS[2], string.format('%d', -floor), 'PX', string.format('%d', math.ceil(hold / 1000)))
else
  redis.call('DEL', KEYS[2])
end
return string.format('%d', floor)
`

var resetScript = redis.NewScript(resetSrc)

// Reset resets shared count key key and its block key blockKey in the
// region's own Redis c (see resetSrc) and returns the reset's floor, the
// region's clock in µs since 1970. keep is the key's longest window and
// block its block length (µs; 0: none). The caller then hands the floor
// to the peers (Entry.Reset), for the key and, with a block length, for
// blockKey.
func Reset(ctx context.Context, c Client, key, blockKey string, keep, block int64) (int64, error) {
	cmd := func(full bool) (int64, error) {
		pipe := c.Pipeline()
		var r *redis.Cmd
		if full {
			r = resetScript.Eval(ctx, pipe, []string{key, blockKey}, keep, block)
		} else {
			r = resetScript.EvalSha(ctx, pipe, []string{key, blockKey}, keep, block)
		}
		if _, err := pipe.Exec(ctx); err != nil {
			return 0, err
		}
		s, err := r.Text()
		if err != nil {
			return 0, err
		}
		return strconv.ParseInt(s, 10, 64)
	}
	floor, err := cmd(false)
	if err != nil && strings.Contains(err.Error(), "NOSCRIPT") {
		floor, err = cmd(true)
	}
	return floor, err
}
