-- give_back.lua: changes one request's cost in a weighted key (a key of a
-- limiter with a cost or a grain, see multi_window.lua) by a signed
-- delta: a rollback, the undo of a failed call or a give-back take the
-- whole request out (delta = -cost); a settlement (Engine.Settle) gives
-- back the part of its estimate it did not use (delta < 0) or charges what
-- it used beyond (delta > 0).
--
-- KEYS[1] is the key; ARGV[1] the delta; ARGV[2] the mode: 'r' for a
-- removal, 's' for a settlement, 'g' for a settlement in a key with
-- grained windows; ARGV[3...] the members the request may have been added
-- under (its id, with every suffix the script may have used when unknown).
-- A weighted member is the running total (16 digits), ':' and that member.
--
-- The entry's total and the totals of every later entry change by the
-- delta, which changes exactly the request's weight in every window it is
-- in, at its own admission time. A negative delta lowers the entry's
-- weight by at most that weight: never below zero, never a credit. An entry
-- left without weight is deleted. An entry that keeps a weight is renamed,
-- so that a second removal or settlement finds nothing: '-' after a
-- removal (it stands for merged requests), the member and '!' after a
-- settlement (a settled request is neither settled again nor given back).
--
-- With more than MOVE later entries, rewriting them all is too costly: a
-- removal then only deletes the entry (its weight counts with the next
-- entry, which leaves the windows later), a refund is not made, and a
-- debt is added to the newest entry; each errs on the side of denying
-- until that entry leaves. A request whose entry is not found changes
-- nothing, except a debt in mode 'g': the entry may have been merged into
-- a later one (grains), so the debt is added to the newest entry, which
-- leaves every window no earlier than the request's own would have.
--
-- Errors: 'ERR slidelimit: running total above 2^53 in <key>' when a
-- debt would make a total lose exactness (nothing is changed).
--
-- Reply: 1 when an entry was removed or changed, 0 otherwise. Reading the
-- whole key costs O(entries); this path is rare.
local MOVE = 64
local TOTAL = 9007199254740991
local kk = KEYS[1]
local delta = tonumber(ARGV[1])
local mode = ARGV[2]
local want, settled = {}, {}
for i = 3, #ARGV do
  want[ARGV[i]] = true
  settled[ARGV[i] .. '!'] = true
end
local function total(m)
  return tonumber(string.sub(m, 1, 16))
end
local function name(t, rest)
  return string.format('%016d', t) .. rest
end
local function too_big(t)
  if t > TOTAL then
    return redis.error_reply('ERR slidelimit: running total above 2^53 in ' .. kk)
  end
end
local es = redis.call('ZRANGE', kk, '0', '+inf', 'BYSCORE', 'WITHSCORES')
-- charge_newest adds a debt to the key's newest entry.
local function charge_newest()
  local m = es[#es - 1]
  local err = too_big(total(m) + delta)
  if err then
    return err
  end
  redis.call('ZREM', kk, m)
  redis.call('ZADD', kk, es[#es], name(total(m) + delta, string.sub(m, 17)))
  return 1
end
for i = 1, #es, 2 do
  local m = es[i]
  local rest = string.sub(m, 18)
  if settled[rest] then
    return 0
  end
  if want[rest] then
    local prev = 0
    if i > 1 then
      prev = total(es[i - 2])
    end
    local xt = total(m)
    -- c: the change of the request's weight, never below minus that weight.
    local c = math.max(delta, prev - xt)
    local tag = ':' .. rest .. '!'
    if mode == 'r' then
      tag = ':-'
    end
    if (#es - i - 1) / 2 > MOVE then
      if mode == 'r' then
        redis.call('ZREM', kk, m)
        return 1
      end
      if c > 0 then
        local err = charge_newest()
        if err then
          return err
        end
      end
      redis.call('ZREM', kk, m)
      redis.call('ZADD', kk, es[i + 1], name(xt, tag))
      return 1
    end
    if c > 0 then
      local err = too_big(total(es[#es - 1]) + c)
      if err then
        return err
      end
    end
    redis.call('ZREM', kk, m)
    if xt + c > prev then
      redis.call('ZADD', kk, es[i + 1], name(xt + c, tag))
    end
    for j = i + 2, #es, 2 do
      local mj = es[j]
      redis.call('ZREM', kk, mj)
      redis.call('ZADD', kk, es[j + 1], name(total(mj) + c, string.sub(mj, 17)))
    end
    return 1
  end
end
if mode == 'g' and delta > 0 and #es > 0 then
  return charge_newest()
end
return 0
