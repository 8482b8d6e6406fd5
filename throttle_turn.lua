-- throttle_turn.lua: the fleet-wide order of the waiters of one throttle
-- lane (throttle_fleet.go). It is a script of its own, beside its Go
-- code, because it shares no key or reply with multi_window.lua: it orders
-- which process asks the engine next, and never counts a call.
--
-- KEYS[1]  queue: sorted set; member a participant (one Throttle in one
--          process), score the arrival (µs, Redis clock) of its head
-- KEYS[2]  leases: sorted set; member a participant, score the end of
--          its lease (µs, server TIME); a participant whose lease ended
--          (a dead process) is dropped
-- KEYS[3]  block: a string with an expiry, set while an upstream's
--          Retry-After holds the lane
-- KEYS[4]  version: a counter of the queue's changes, so that a process
--          applies a reply and the messages in the order they were made
--          (a reply may arrive after a later message)
-- ARGV[1]  op: 'j' join or renew, 'p' pass the turn (ARGV[3] < 0:
--          leave), 'b' block for ARGV[7] ms, 'g' read the block and
--          the queue (a process's first call for the lane)
-- ARGV[2]  member, ARGV[3] score, ARGV[4] lease (µs), ARGV[5] channel,
--          ARGV[6] lane id, ARGV[7] hint (µs, 'p') or block (ms, 'b')
--
-- Reply: {mine, others, n, block, version, now}: mine 1 when member is
-- first; others the lowest score of another member, -1 for none; n the
-- queue's size; block the block's PTTL (ms, negative for none); version
-- the queue's version after the op (0 for 'b' and 'g'); now the server's
-- TIME (µs), from which each process learns the clock its arrival stamps
-- are read on. For 'g', others is the lowest score of any member, dead
-- ones included.
--
-- Messages on ARGV[5], fields separated by '|':
--   j|lane|member|score|version
--                              member joined (or renewed) with score
--   t|lane|member|hint|others|score|version
--                              member, whose head arrived at score, is
--                              first now and may ask after hint µs;
--                              others as in the reply
--   e|lane|version             the queue is empty
--   b|lane|ms                  an upstream blocked the lane for ms
local op, me, ch, lane = ARGV[1], ARGV[2], ARGV[5], ARGV[6]
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
if op == 'b' then
  redis.call('SET', KEYS[3], '1', 'PX', ARGV[7])
  redis.call('PUBLISH', ch, 'b|' .. lane .. '|' .. ARGV[7])
  return {0, -1, 0, tonumber(ARGV[7]), 0, now}
end
if op == 'g' then
  local head = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
  local first = -1
  if head[1] then first = tonumber(head[2]) end
  return {0, first, redis.call('ZCARD', KEYS[1]), redis.call('PTTL', KEYS[3]), 0, now}
end
local lease = tonumber(ARGV[4])
local v = redis.call('INCR', KEYS[4])
local before = redis.call('ZRANGE', KEYS[1], 0, 0)[1]
local dead = redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', now)
for _, m in ipairs(dead) do
  redis.call('ZREM', KEYS[1], m)
  redis.call('ZREM', KEYS[2], m)
end
local score = tonumber(ARGV[3])
if score >= 0 then
  redis.call('ZADD', KEYS[1], score, me)
  redis.call('ZADD', KEYS[2], now + lease, me)
  if op == 'j' then
    redis.call('PUBLISH', ch, 'j|' .. lane .. '|' .. me .. '|' .. ARGV[3] .. '|' .. v)
  end
else
  redis.call('ZREM', KEYS[1], me)
  redis.call('ZREM', KEYS[2], me)
end
local head = redis.call('ZRANGE', KEYS[1], 0, 1, 'WITHSCORES')
local n = redis.call('ZCARD', KEYS[1])
local mine, others = 0, -1
if head[1] == me then
  mine = 1
  if head[3] then others = tonumber(head[4]) end
elseif head[1] then
  others = tonumber(head[2])
end
if head[1] == nil then
  if before ~= nil then redis.call('PUBLISH', ch, 'e|' .. lane .. '|' .. v) end
elseif head[1] ~= me and (before ~= head[1]) then
  -- The turn moved (passed on, or its holder died): tell the new first.
  local second = -1
  if head[3] then second = tonumber(head[4]) end
  local hint = '0'
  if op == 'p' then hint = ARGV[7] end
  redis.call('PUBLISH', ch, 't|' .. lane .. '|' .. head[1] .. '|' .. hint .. '|' ..
    string.format('%d', second) .. '|' .. string.format('%d', tonumber(head[2])) .. '|' .. v)
end
if n > 0 then
  local ttl = math.floor(lease / 250)
  redis.call('PEXPIRE', KEYS[1], ttl)
  redis.call('PEXPIRE', KEYS[2], ttl)
end
redis.call('PEXPIRE', KEYS[4], math.floor(lease / 250))
return {mine, others, n, redis.call('PTTL', KEYS[3]), v, now}
