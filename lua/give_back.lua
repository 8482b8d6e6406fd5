-- give_back.lua: removes one request's entry from a weighted key (a key
-- of a limiter with a cost or a grain, see multi_window.lua and
-- engine/doc.go) for a rollback, the undo of a failed call or a give-back.
--
-- KEYS[1] is the key; ARGV[1] the request's cost in it; ARGV[2...] the
-- members the request may have been added under (its id, with every suffix
-- the script may have used when unknown). A weighted member is the running
-- total (16 digits), ':' and that member.
--
-- Removing an entry from the middle moves its weight to the next entry
-- (whose total includes it), which leaves the windows later: the request
-- stays counted until then, erring on the side of denying. The newest
-- entry is rewritten with its total less the cost, under the member '-'
-- (so a second removal finds nothing): it may stand for merged requests,
-- whose weight stays. A request whose entry was merged into a later one
-- is not found, and stays counted until that entry leaves.
--
-- Reply: 1 when an entry was removed or rewritten, 0 otherwise. Reading
-- the whole key costs O(entries); this path is rare.
local kk = KEYS[1]
local cost = tonumber(ARGV[1])
local want = {}
for i = 2, #ARGV do
  want[ARGV[i]] = true
end
local es = redis.call('ZRANGE', kk, '0', '+inf', 'BYSCORE', 'WITHSCORES')
for i = 1, #es, 2 do
  local m = es[i]
  if want[string.sub(m, 18)] then
    redis.call('ZREM', kk, m)
    if i + 2 > #es then
      local prev = 0
      if i > 1 then
        prev = tonumber(string.sub(es[i - 2], 1, 16))
      end
      local nt = tonumber(string.sub(m, 1, 16)) - cost
      if nt > prev then
        redis.call('ZADD', kk, es[i + 1], string.format('%016d', nt) .. ':-')
      end
    end
    return 1
  end
end
return 0
