-- give_back.lua: removes one request's entry from a weighted key (a key
-- of a limiter with a cost or a grain, see multi_window.lua) for a
-- rollback, the undo of a failed call or a give-back.
--
-- KEYS[1] is the key; ARGV[1] the request's cost in it; ARGV[2...] the
-- members the request may have been added under (its id, with every suffix
-- the script may have used when unknown). A weighted member is the running
-- total (16 digits), ':' and that member.
--
-- The entry's total and the totals of every later entry are lowered by the
-- cost, which takes exactly the request out of every window. An entry that
-- stands for merged requests (its weight is more than the cost) stays,
-- renamed '-' so that a second removal finds nothing. With more than
-- MOVE later entries, the entry is only deleted: its weight then counts
-- with the next entry, which leaves the windows later, erring on the side
-- of denying until then. A request whose entry was merged into a later
-- one is not found, and stays counted until that entry leaves.
--
-- Reply: 1 when an entry was removed or lowered, 0 otherwise. Reading the
-- whole key costs O(entries); this path is rare.
local MOVE = 64
local kk = KEYS[1]
local cost = tonumber(ARGV[1])
local want = {}
for i = 2, #ARGV do
  want[ARGV[i]] = true
end
local function total(m)
  return tonumber(string.sub(m, 1, 16))
end
local es = redis.call('ZRANGE', kk, '0', '+inf', 'BYSCORE', 'WITHSCORES')
for i = 1, #es, 2 do
  local m = es[i]
  if want[string.sub(m, 18)] then
    redis.call('ZREM', kk, m)
    if (#es - i - 1) / 2 > MOVE then
      return 1
    end
    local prev = 0
    if i > 1 then
      prev = total(es[i - 2])
    end
    local xt = total(m)
    local c = math.min(cost, xt - prev)
    if xt - c > prev then
      redis.call('ZADD', kk, es[i + 1], string.format('%016d', xt - c) .. ':-')
    end
    for j = i + 2, #es, 2 do
      local mj = es[j]
      redis.call('ZREM', kk, mj)
      redis.call('ZADD', kk, es[j + 1], string.format('%016d', total(mj) - c) .. string.sub(mj, 17))
    end
    return 1
  end
end
return 0
