-- turn.lua: the fleet-wide order of the waiters of one throttle
-- lane (fleet.go). It is a script of its own, beside its Go
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
-- KEYS[5]  sequences: hash; field a participant, value the sequence
--          number of its last applied 'j' or 'p'. A process numbers its
--          ops in the order it decides them and may send them over
--          different connections, which Redis may run in another order:
--          an op older than one applied already is refused (it changes
--          nothing), so a late pass cannot put back an entry that left.
-- KEYS[6]  flows: hash; field a flow (class, newline, tenant), value its
--          finish tag F (µs), and field '' virtual time V; op 't' sets
--          it (classes.go). A field whose F virtual time passed is
--          deleted by the next 't'; the key expires with the queue's.
-- ARGV[1]  op: 'j' join or renew, 'p' pass the turn (ARGV[3] < 0:
--          leave), 'b' block for ARGV[7] ms, 'g' read the block and
--          the queue (a process's first call for the lane), 'k' tell
--          the fleet that the windows have room now (a call given back),
--          't' tag a waiting call of flow ARGV[3] (below), 'r' return
--          a free tag (below)
-- ARGV[2]  member, ARGV[3] score, ARGV[4] lease (µs), ARGV[5] channel,
--          ARGV[6] lane id, ARGV[7] hint ('p': the time, µs on this
--          server's clock as the passer knows it, after which the new
--          first may ask) or block (ms, 'b'),
--          ARGV[8] the op's sequence number ('j' and 'p', >= 1)
--
-- Op 't': ARGV[3] the flow's field, ARGV[7] its increment (µs) at a
-- weight of 1%, ARGV[8] its class's weight (%), ARGV[9] its class and a
-- newline when the class's weight is split between its tenants, else '',
-- ARGV[10] the flow's credit c, in increments (0 when absent).
-- Virtual time V is the larger of the lowest score in the queue and the
-- V of the last 't' (field '' of KEYS[6]), or now for a new hash. With
-- F the flow's finish tag (V for a flow with none), the call's tag is
-- F - c * inc, and F becomes F + inc, inc = ARGV[7] * n / ARGV[8], n
-- the flows of ARGV[9] with an F ahead of V (the call's own included), 1
-- without ARGV[9]; the increment is at most 1e12. So the calls of a flow
-- with credit c are tagged c increments earlier than without: a flow
-- with none waiting starts c increments before V. Fields
-- whose F is not ahead of V are deleted. Reply {tag, inc, n, -1, 0, now,
-- 1, 1}; no message. Every 'j' and 'p' renews KEYS[6] with the queue.
--
-- Op 'r': a tagged call gave up before its turn, and its flow's last tag
-- is free: ARGV[3] the flow's field, ARGV[7] the finish tag that tag
-- gave the flow (tag + (c + 1) * inc), ARGV[9] its increment. When the
-- flow's F is still that finish tag, F goes back by the increment, so
-- the flow's next call takes the free tag; else (a later call was
-- tagged, or the field is gone) nothing changes. Reply {0, -1, 0, -1, 0,
-- now, 1}; no message.
--
-- Reply: {mine, others, n, block, version, now, applied, flows}: mine 1 when
-- member is first; others the lowest score of another member, -1 for
-- none; n the queue's size; block the block's PTTL (ms, negative for
-- none); version the queue's version after the op (0 for 'b', 'g', 'k');
-- now the server's TIME (µs), from which each process learns the clock
-- its arrival stamps are read on; applied 0 when the op was refused as
-- older than one applied (the rest of the reply is then the queue as it
-- is); flows 1 when KEYS[6] exists (calls with a class or tenant are
-- tagged in the lane: the others are tagged too), left out for 'b' and
-- 'k'. For 'g', others is the lowest score of any member, dead ones
-- included.
--
-- Messages on ARGV[5], fields separated by '|':
--   q|lane|version|first|seq|score|second|hint
--                              the queue after an op that changed its
--                              first member or the first two scores:
--                              first the first member ('' when empty),
--                              seq the sequence of its last applied op,
--                              score its score, second the second
--                              member's score (-1 for none); hint
--                              (ARGV[7]) when the turn moved to first by
--                              a pass: it may ask after hint, else -1.
--                              Every
--                              participant learns from it alone whether
--                              it has the turn and the earliest arrival
--                              of the others, whatever it missed before.
--   b|lane|ms                  an upstream blocked the lane for ms
--   k|lane                     the lane's windows have room now: the
--                              head of the process on turn asks at once
local op, me, ch, lane = ARGV[1], ARGV[2], ARGV[5], ARGV[6]
-- tag is op 't' at time now.
local function tag(now)
  local v = tonumber(redis.call('HGET', KEYS[6], '') or tostring(now))
  local h = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
  if h[2] and tonumber(h[2]) > v then v = tonumber(h[2]) end
  local field, class = ARGV[3], ARGV[9]
  local flows = redis.call('HGETALL', KEYS[6])
  local n, start = 1, v
  for i = 1, #flows, 2 do
    local f = tonumber(flows[i + 1])
    if flows[i] == '' then
    elseif f <= v then
      redis.call('HDEL', KEYS[6], flows[i])
    elseif flows[i] == field then
      start = f
    elseif class ~= '' and string.sub(flows[i], 1, #class) == class then
      n = n + 1
    end
  end
  local inc = math.max(math.min(math.floor(tonumber(ARGV[7]) * n / tonumber(ARGV[8])), 1e12), 1)
  local tagged = start - tonumber(ARGV[10] or '0') * inc
  redis.call('HSET', KEYS[6], field, string.format('%d', start + inc), '', string.format('%d', v))
  redis.call('PEXPIRE', KEYS[6], math.floor(tonumber(ARGV[4]) / 250))
  return {tagged, inc, n, -1, 0, now, 1, 1}
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
if op == 'b' then
  redis.call('SET', KEYS[3], '1', 'PX', ARGV[7])
  redis.call('PUBLISH', ch, 'b|' .. lane .. '|' .. ARGV[7])
  return {0, -1, 0, tonumber(ARGV[7]), 0, now, 1}
end
if op == 'k' then
  redis.call('PUBLISH', ch, 'k|' .. lane)
  return {0, -1, 0, -1, 0, now, 1}
end
if op == 't' then
  return tag(now)
end
if op == 'r' then
  local fend = tonumber(ARGV[7])
  if tonumber(redis.call('HGET', KEYS[6], ARGV[3]) or '-1') == fend then
    redis.call('HSET', KEYS[6], ARGV[3], string.format('%d', fend - tonumber(ARGV[9])))
  end
  return {0, -1, 0, -1, 0, now, 1}
end
if op == 'g' then
  local head = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
  local first = -1
  if head[1] then first = tonumber(head[2]) end
  return {0, first, redis.call('ZCARD', KEYS[1]), redis.call('PTTL', KEYS[3]), 0, now, 1,
    redis.call('EXISTS', KEYS[6])}
end
-- head returns the first member ('' for none), its score and the
-- second's score (-1 for none).
local function head()
  local h = redis.call('ZRANGE', KEYS[1], 0, 1, 'WITHSCORES')
  if h[1] == nil then return '', -1, -1 end
  local second = -1
  if h[3] then second = tonumber(h[4]) end
  return h[1], tonumber(h[2]), second
end
local lease, seq = tonumber(ARGV[4]), tonumber(ARGV[8])
local v = redis.call('INCR', KEYS[4])
local f0, s0, t0 = head()
local dead = redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', now)
for _, m in ipairs(dead) do
  redis.call('ZREM', KEYS[1], m)
  redis.call('ZREM', KEYS[2], m)
  redis.call('HDEL', KEYS[5], m)
end
local applied = 0
if seq > tonumber(redis.call('HGET', KEYS[5], me) or '0') then
  applied = 1
  redis.call('HSET', KEYS[5], me, seq)
  local score = tonumber(ARGV[3])
  if score >= 0 then
    redis.call('ZADD', KEYS[1], score, me)
    redis.call('ZADD', KEYS[2], now + lease, me)
  else
    redis.call('ZREM', KEYS[1], me)
    redis.call('ZREM', KEYS[2], me)
  end
end
local f1, s1, t1 = head()
if f1 ~= f0 or s1 ~= s0 or t1 ~= t0 then
  local hint, fseq = '-1', '0'
  if op == 'p' and f1 ~= f0 and f1 ~= me then hint = ARGV[7] end
  if f1 ~= '' then fseq = redis.call('HGET', KEYS[5], f1) or '0' end
  redis.call('PUBLISH', ch, 'q|' .. lane .. '|' .. v .. '|' .. f1 .. '|' .. fseq .. '|' ..
    string.format('%d', s1) .. '|' .. string.format('%d', t1) .. '|' .. hint)
end
local n = redis.call('ZCARD', KEYS[1])
local mine, others = 0, s1
if f1 == me then mine, others = 1, t1 end
local ttl = math.floor(lease / 250)
if n > 0 then
  redis.call('PEXPIRE', KEYS[1], ttl)
  redis.call('PEXPIRE', KEYS[2], ttl)
end
redis.call('PEXPIRE', KEYS[4], ttl)
redis.call('PEXPIRE', KEYS[5], ttl)
redis.call('PEXPIRE', KEYS[6], ttl)
return {mine, others, n, redis.call('PTTL', KEYS[3]), v, now, applied, redis.call('EXISTS', KEYS[6])}
