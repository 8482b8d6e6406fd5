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
-- KEYS[7]  shifts: hash; field a flow, value the moves of its waiters
--          the script told the fleet of in the last 5 s (messages h and
--          a), at most 64, as 'at,x,inc;' each (x 0 for a message a):
--          op 'r' finds its call's place where the moves it was not told
--          of put it. A field goes with its flow's field of KEYS[6]; the
--          key expires with the queue's.
-- ARGV[1]  op: 'j' join or renew, 'p' pass the turn (ARGV[3] < 0:
--          leave), 'b' block for ARGV[7] ms, 'g' read the block and
--          the queue (a process's first call for the lane), 'k' tell
--          the fleet that the windows have room now (a call given back),
--          't' tag a waiting call of flow ARGV[3] (below), 'r' return
--          a free tag (below), 'a' charge a call admitted at once (below)
-- ARGV[2]  member, ARGV[3] score, ARGV[4] lease (µs), ARGV[5] channel,
--          ARGV[6] lane id, ARGV[7] hint ('p': the time, µs on this
--          server's clock as the passer knows it, after which the new
--          first may ask) or block (ms, 'b'),
--          ARGV[8] the op's sequence number ('j' and 'p', >= 1)
--
-- Op 't': ARGV[3] the flow's field, ARGV[7] its increment (µs) at a
-- weight of 1%, ARGV[8] its class's weight (%), ARGV[9] its class and a
-- newline when the class's weight is split between its tenants, else '',
-- ARGV[10] the flow's credit c, in increments (0 when absent), ARGV[11]
-- the highest tag of a call of the flow's class the tagging process
-- admitted in the lane, its credit undone (0 for none).
-- Virtual time V is the larger of the lowest score in the queue and the
-- V of the last 't' (field '' of KEYS[6]), or now for a new hash.
-- Tags are two-level. Within a split class, each tenant's calls are
-- tagged on the class's inner clock, one inner increment apart, inc =
-- ARGV[7] / ARGV[8] (at most 1e12), whatever the number of tenants: with
-- F the flow's inner finish tag (field ARGV[3]), the call's inner tag is
-- x = F, or for a flow with none the class's inner time at V plus the
-- number of its other flows ahead (so tenants take turns in a fixed
-- order), and F becomes x + inc. A flow with none starts no earlier than
-- the inner time at ARGV[11], the class's tag last served in the tagging
-- process:
-- V may lag the tags a class is served at (another class's credited
-- calls keep the lowest score in the queue below them), and a flow new
-- to the class would otherwise take several turns in a row while the
-- class's other flows wait. A flow with an F keeps it: a tenant whose
-- caller was briefly not waiting (between a call and its next) takes the
-- turns it missed meanwhile. So the class's tenants take turns, one
-- call each, round after round. The class's grid (field TAB class of
-- KEYS[6]: A|X0|n|epoch) maps inner tags to the fleet's order: tag =
-- A + (x - X0) * n - c * inc, n the class's flows with an F ahead of
-- its inner time (the call's own included), its inner time at V being
-- X0 + (V - A) / n. When a tag finds n changed, the grid is continued
-- from V with the new n (a new epoch, the server's TIME or one more than
-- the last), and every process remaps its waiting calls of the class
-- (message c): the class's part of the admissions stays its weight
-- however many tenants share it, and calls tagged while fewer tenants
-- waited move apart. Without ARGV[9] the grid is the identity (tag =
-- x - c * inc). Fields whose F is not ahead of their class's inner time
-- are deleted; grids stay until the hash expires. Reply {tag, inc, n, -1,
-- 0, now, 1, 1, x, A, X0, epoch} (A, X0, epoch 0, 0, 0 without ARGV[9]).
-- Every 'j' and 'p' renews KEYS[6] and KEYS[7] with the queue. Every applied 'p' (a
-- call admitted or gone) counts each split class's flows ahead again and
-- continues its grid when their number changed (message c): a class
-- whose other tenants' calls were all served spaces its calls left for
-- the tenants that wait.
--
-- Op 'r': a tagged call gave up before its turn: ARGV[3] its flow's
-- field, ARGV[7] its inner tag x, ARGV[9] its increment, ARGV[10] the
-- time of the last move of its flow it was told of (or of its tag). x
-- first takes the moves of the flow made since (KEYS[7]), which its
-- process had not applied to it: two calls of a flow that give up at
-- once, each sending the tag it held, would otherwise leave the flow's
-- later calls on one tag. When the flow's F is ahead of x, F goes back
-- by the increment and the fleet is told (message h, with x so moved):
-- every process, the sender's too, moves its waiting calls of the flow
-- tagged after x back by the increment, as if the call had never been
-- tagged, so that a tenant whose waiters give up keeps its turns. The
-- times of a flow's moves increase (one µs past the last when TIME has
-- not moved on). Reply {0, -1, 0, -1, 0, now, 1}.
--
-- Op 'a': a call of flow ARGV[3] was admitted at once, untagged, while
-- calls of the lane waited or were tagged; ARGV[7] to ARGV[10] as for
-- 't'. It spent its flow's next turn: when the flow's F is ahead of its
-- class's inner time, F moves on by the increment and the fleet is told
-- (message a): every process, the sender's too, moves its waiting calls
-- of the flow later by the increment, as if the call had been tagged
-- before them. Else it is tagged as by 't' (F is set one increment past
-- the call's tag), and the reply is 't''s; else {0, -1, 0, -1, 0, now, 1}.
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
--   h|lane|member|x|inc|now|field
--                              a call of flow field, inner tag x, gave up
--                              in member (op 'r', at now, the server's
--                              TIME): every process moves its calls of
--                              the flow tagged after x back by inc
--   a|lane|member|inc|now|field
--                              a call of flow field was admitted at
--                              once in member (op 'a', at now): every
--                              process moves its calls of the flow later
--                              by inc
--                              A process applies h and a to a call whose
--                              tag came before now and that it queues
--                              after the message (fleet.go, shifted).
--   c|lane|n|A|X0|epoch|class  split class class (with its newline) has
--                              a new grid (op 't'): every process remaps
--                              its waiting calls of the class, when the
--                              epoch is newer than the grid it holds
local op, me, ch, lane = ARGV[1], ARGV[2], ARGV[5], ARGV[6]
-- grids reads the flows hash: its flows (field -> finish tag), the grids
-- of the split classes (class -> {A, X0, n, epoch}) and V.
local function grids(now)
  local all = redis.call('HGETALL', KEYS[6])
  local flows, gs, v = {}, {}, now
  for i = 1, #all, 2 do
    local k, val = all[i], all[i + 1]
    if k == '' then
      v = tonumber(val)
    elseif string.sub(k, 1, 1) == '\t' then
      local a, x0, n, e = string.match(val, '^(%-?%d+)|(%-?%d+)|(%d+)|(%d+)$')
      gs[string.sub(k, 2)] = {tonumber(a), tonumber(x0), tonumber(n), tonumber(e)}
    else
      flows[k] = tonumber(val)
    end
  end
  return flows, gs, v
end
-- inner is the inner time of grid g (nil: the identity) at virtual time v.
local function inner(g, v)
  if not g then return v end
  return g[2] + math.floor(math.max(v - g[1], 0) / g[3])
end
-- regrid gives split class c the grid of n flows from inner time x,
-- continuing its grid g (nil for none) at virtual time v, and tells the
-- fleet: message c|lane|n|A|X0|epoch|class.
local function regrid(c, g, n, x, v, now)
  local a, e = v, now
  if g then a, e = g[1] + (x - g[2]) * g[3], math.max(now, g[4] + 1) end
  local ng = {a, x, n, e}
  local s = string.format('%d|%d|%d|%d', a, x, n, e)
  redis.call('HSET', KEYS[6], '\t' .. c, s)
  redis.call('PUBLISH', ARGV[5], 'c|' .. ARGV[6] .. '|' .. string.format('%d|%d|%d|%d|', n, a, x, e) .. c)
  return ng
end
-- moved notes a move of flow field's waiters (those after inner tag x
-- back by inc; x 0 and inc negative: all of them later) made at now, in
-- KEYS[7], and returns the move's time: now, or one µs past the flow's
-- last move. Moves older than 5 s are dropped, and all but the last 64.
local function moved(field, now, x, inc)
  local keep, last = {}, 0
  for at, e in string.gmatch(redis.call('HGET', KEYS[7], field) or '', '(%-?%d+)(,[^;]*;)') do
    at = tonumber(at)
    last = math.max(last, at)
    if at > now - 5000000 then keep[#keep + 1] = string.format('%d', at) .. e end
  end
  if #keep >= 64 then keep = {unpack(keep, #keep - 62)} end
  local t = math.max(now, last + 1)
  keep[#keep + 1] = string.format('%d,%d,%d;', t, x, inc)
  redis.call('HSET', KEYS[7], field, table.concat(keep))
  redis.call('PEXPIRE', KEYS[7], math.floor(tonumber(ARGV[4]) / 250))
  return t
end
-- forget deletes flow k's fields: its finish tag and its moves.
local function forget(k)
  redis.call('HDEL', KEYS[6], k)
  redis.call('HDEL', KEYS[7], k)
end
-- tag is op 't' at time now.
local function tag(now)
  local flows, gs, v = grids(now)
  local h = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
  if h[2] and tonumber(h[2]) > v then v = tonumber(h[2]) end
  local field, class = ARGV[3], ARGV[9]
  local g = nil
  if class ~= '' then g = gs[class] end
  local xv = inner(g, v)
  local n, start = 1, nil
  for k, f in pairs(flows) do
    local c = string.match(k, '^[^\n]*\n') or ''
    if f <= inner(gs[c], v) then
      forget(k)
    elseif k == field then
      start = f
    elseif class ~= '' and c == class then
      n = n + 1
    end
  end
  -- A new flow starts at the inner time, after the flows ahead of it, so
  -- that tenants tie in no round; no earlier than the inner time at the
  -- last served tag, on the grid it was served on.
  local xs, served = xv, tonumber(ARGV[11] or '0') or 0
  if served > v then xs = math.max(xv, inner(g, served)) end
  if class ~= '' and (not g or g[3] ~= n) then g = regrid(class, g, n, xv, v, now) end
  g = g or {0, 0, 1, 0}
  start = start or xs + n - 1
  local inc = math.max(math.min(math.floor(tonumber(ARGV[7]) / tonumber(ARGV[8])), 1e12), 1)
  -- The credit shifts every call of the class alike, by c increments of
  -- the fleet's order whatever n: the class leads its share by c calls,
  -- not c rounds of its tenants.
  local tagged = g[1] + (start - g[2]) * g[3] - tonumber(ARGV[10] or '0') * inc
  redis.call('HSET', KEYS[6], field, string.format('%d', start + inc), '', string.format('%d', v))
  redis.call('PEXPIRE', KEYS[6], math.floor(tonumber(ARGV[4]) / 250))
  redis.call('PEXPIRE', KEYS[7], math.floor(tonumber(ARGV[4]) / 250))
  return {tagged, inc, n, -1, 0, now, 1, 1, start, g[1], g[2], g[4]}
end
-- refresh is op 'p' (a call admitted or gone) on a lane with a flows
-- hash: the grid of every split class whose flows ahead of its inner time
-- are no longer n (a tenant's calls all served or gone) is continued from
-- V with their number, so that the class's calls left are spaced for the
-- tenants that wait. Fields whose F is not ahead are deleted.
local function refresh(now)
  if redis.call('EXISTS', KEYS[6]) == 0 then return end
  local flows, gs, v = grids(now)
  local h = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
  if h[2] and tonumber(h[2]) > v then v = tonumber(h[2]) end
  local count = {}
  for k, f in pairs(flows) do
    local c = string.match(k, '^[^\n]*\n') or ''
    if f <= inner(gs[c], v) then
      forget(k)
    else
      count[c] = (count[c] or 0) + 1
    end
  end
  for c, g in pairs(gs) do
    local n = count[c] or 0
    if n > 0 and n ~= g[3] then regrid(c, g, n, inner(g, v), v, now) end
  end
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
if op == 'a' then
  local flows, gs, v = grids(now)
  local h = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
  if h[2] and tonumber(h[2]) > v then v = tonumber(h[2]) end
  local f, g = flows[ARGV[3]], nil
  if ARGV[9] ~= '' then g = gs[ARGV[9]] end
  if not f or f <= inner(g, v) then
    return tag(now)
  end
  local inc = math.max(math.min(math.floor(tonumber(ARGV[7]) / tonumber(ARGV[8])), 1e12), 1)
  redis.call('HSET', KEYS[6], ARGV[3], string.format('%d', f + inc))
  local at = moved(ARGV[3], now, 0, -inc)
  redis.call('PUBLISH', ch, 'a|' .. lane .. '|' .. me .. '|' .. string.format('%d|%d|', inc, at) .. ARGV[3])
  return {0, -1, 0, -1, 0, now, 1}
end
if op == 'r' then
  local x, inc, seen = tonumber(ARGV[7]), tonumber(ARGV[9]), tonumber(ARGV[10] or '')
  if seen then
    for at, sx, si in string.gmatch(redis.call('HGET', KEYS[7], ARGV[3]) or '', '(%-?%d+),(%-?%d+),(%-?%d+);') do
      if tonumber(at) > seen and x > tonumber(sx) then x = x - tonumber(si) end
    end
  end
  local f = tonumber(redis.call('HGET', KEYS[6], ARGV[3]) or '-1')
  if f > x then
    redis.call('HSET', KEYS[6], ARGV[3], string.format('%d', f - inc))
    local at = moved(ARGV[3], now, x, inc)
    redis.call('PUBLISH', ch, 'h|' .. lane .. '|' .. me .. '|' .. string.format('%d|%d|%d|', x, inc, at) .. ARGV[3])
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
if op == 'p' and applied == 1 then refresh(now) end
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
redis.call('PEXPIRE', KEYS[7], ttl)
return {mine, others, n, redis.call('PTTL', KEYS[3]), v, now, applied, redis.call('EXISTS', KEYS[6])}
