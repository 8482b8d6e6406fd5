-- give_back.lua: changes one request's cost in a weighted key (a key of a
-- limiter with a cost or a grain, see multi_window.lua) by a signed
-- delta: a rollback, the undo of a failed call or a give-back take the
-- whole request out (delta = -cost); a settlement (Engine.Settle) gives
-- back the part of its estimate it did not use (delta < 0) or charges what
-- it used beyond (delta > 0).
--
-- KEYS[1] is the key; ARGV[1] the delta; ARGV[2] the mode: 'r' for a
-- removal, 's' for a settlement, 'g' for a settlement in a key with
-- grained windows, which is followed by ARGV[3] the request's decision
-- time and ARGV[4] the key's coarsest grain (µs); then the members the
-- request may have been added under (its id, with every suffix the script
-- may have used when unknown). A weighted member is the running total (16
-- digits), ':' and that member.
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
-- nothing, except in mode 'g': its entry may have been merged into the
-- next one (grains), which then carries its cost: the first entry scored
-- at or after the decision time, if it lies in the same coarsest grain, is
-- settled instead (a refund of at most its weight; it is not renamed, as
-- it stands for other requests too), else a debt goes to the newest
-- entry, which leaves every window no earlier than the request's own
-- would have.
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
local first_member = 3
local at, grain
if mode == 'g' then
  at, grain, first_member = tonumber(ARGV[3]), tonumber(ARGV[4]), 5
end
local want, settled = {}, {}
for i = first_member, #ARGV do
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
-- change changes the weight of the entry at index i of es by delta,
-- renaming it with tag (nil: keep its name).
local function change(i, tag)
  local m = es[i]
  local prev = 0
  if i > 1 then
    prev = total(es[i - 2])
  end
  local xt = total(m)
  -- c: the change of the request's weight, never below minus that weight.
  local c = math.max(delta, prev - xt)
  tag = tag or string.sub(m, 17)
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
for i = 1, #es, 2 do
  local rest = string.sub(es[i], 18)
  if settled[rest] then
    return 0
  end
  if want[rest] then
    if mode == 'r' then
      return change(i, ':-')
    end
    return change(i, ':' .. rest .. '!')
  end
end
if mode == 'g' then
  for i = 1, #es, 2 do
    local score = tonumber(es[i + 1]) or sci(es[i + 1])
    if score >= at then
      if math.floor(score / grain) == math.floor(at / grain) then
        return change(i, nil)
      end
      break
    end
  end
  if delta > 0 and #es > 0 then
    return charge_newest()
  end
end
return 0
