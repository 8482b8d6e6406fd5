-- multi_window.lua: exact multi-window sliding logs in sorted sets.
--
-- The engine package documentation (engine/doc.go) is the specification;
-- this comment summarises the wire format and the cost-driven choices.
--
-- In the JSON format (the cluster path's), ARGV[1] is a JSON array of
-- integers and member strings:
--   t, nops, op...
-- t is the decision time in microseconds, or 0 to use the server's TIME.
-- Each op is
--   mode, member, nkeys, then per key: nwin, then per window: period, limit
-- with mode 1 = allow (check every window, admit in every key or none) and
-- 2 = peek (check only). An op uses the next nkeys KEYS. Periods are in
-- microseconds; the windows of a key come longest first.
--
-- The reply is one string of space-separated integers: the time as seconds
-- and microseconds, then per op
--   code, then per key and window: used [oldest [edge]]
-- where code = status + 4*suffix, status being 1 when admitted (or, for
-- peek, when the request would be), 0 when denied and 2 when no unique
-- member was found (nothing written), and suffix the number of member
-- collisions retried. used counts the window's entries before this op;
-- oldest, present when used > 0, is the score of the window's oldest
-- entry; edge, present when used >= limit, is the score of the entry at
-- rank used-limit in the window, the last that must leave for the request
-- to fit.
--
-- Cost: each redis.call costs about 1 µs of Redis CPU beyond the command
-- itself, and turning a Lua number into a string about 0.2 µs, which is
-- most of what a decision costs (callgrind on redis-server 7.0: glibc's
-- strtod and printf take 1,000-2,000 instructions per number, a
-- decision about 100,000). Hence: numbers are converted as few times as
-- possible, each key's fields are parsed once, shorter windows
-- are derived from longer ones where possible (reading a key's few entries
-- whole in one call was measured and is no cheaper: converting a reply
-- element costs about half a redis.call), and the per-key bookkeeping (retention, trim, expiry) runs once per epoch
-- instead of once per admission (see engine/doc.go).

-- Two argument formats share the code below. The flat one (the engine's
-- default on a single server) passes every field as its own ARGV string,
-- so nothing is JSON-decoded:
--   t, then per op: member, nkeys, then per key: nwin, busy, then per
--   window: period, limit
-- where an empty member means peek, and busy is the key's epoch length
-- once it is busy (ceil(longest period / 8), see below), passed as a
-- string so that the marker's name needs no number formatting. Its reply
-- is an array of integers in the order described above (oldest and edge
-- as plain scores). The JSON one is the format described above, with its
-- string reply.
local json = #ARGV == 1
local a = ARGV
if json then
  a = cjson.decode(ARGV[1])
end
local call = redis.call
local fmt = string.format
local num = tonumber
local floor = math.floor
local t = num(a[1])
local out = {}
if t == 0 then
  local now = call('TIME')
  local s, u = num(now[1]), num(now[2])
  out[1], out[2] = s, u
  t = s * 1000000 + u
else
  out[1] = floor(t / 1000000)
  out[2] = t % 1000000
end
-- redis.call turns number arguments into strings with %.17g, which costs
-- more than the command itself for ZCOUNT; numbers are formatted here, as
-- few times as possible (%d: exact for integers below 2^53, unlike Lua's
-- own 14-digit conversion).
local ts -- t as a score, formatted at the first admission

-- Markers are members with negative scores, which no window [t-W+1, t]
-- (t > W) counts and no trim (from 0) removes: 'r' scored -retention, and
-- per epoch length I a member 'e'..I scored -(EPOCH + epoch number).
local EPOCH = 2251799813685248 -- 2^51, below every -retention
local BUSY = 64 -- a key with BUSY entries in its longest window is trimmed 8 times per window

local n = 2 -- last index written in out
local p -- next index to read in a
local key = 0 -- KEYS used by the previous ops
local counts = {} -- per key of the op: entries in its longest window, its longest period and where its fields start
local kfields -- per-key fields before the windows: nwin (and busy when flat)
local nops
if json then
  nops, p, kfields = a[2], 3, 1
else
  nops, p, kfields = -1, 2, 2
end

while nops ~= 0 and p <= #a do
  nops = nops - 1
  local mode, member, nk
  if json then
    mode, member, nk = a[p], a[p + 1], a[p + 2]
    p = p + 3
  else
    member, nk = a[p], num(a[p + 1])
    mode = 1
    if member == '' then
      mode = 2
    end
    p = p + 2
  end
  n = n + 1
  local code = n
  local ok = true
  local q = p
  for k = 1, nk do
    local kk = KEYS[key + k]
    local nw = num(a[q])
    local kq = q
    q = q + kfields
    -- Scores are integers, so the window (t-W, t] is [t-W+1, t]. The
    -- upper bound is +inf, not t: after the server's clock went back (an
    -- NTP step, a failover to a replica whose clock is behind) entries
    -- admitted "after" t must still count, or the window over-admits.
    local pused, pold = -1, nil
    for wi = 1, nw do
      local lo, l = t - num(a[q]) + 1, num(a[q + 1])
      q = q + 2
      local used, old, los
      if wi == 1 then
        los = fmt('%d', lo)
        used = call('ZCOUNT', kk, los, '+inf')
        counts[3 * k - 2], counts[3 * k - 1], counts[3 * k] = used, t + 1 - lo, kq
      elseif pused == 0 then
        used = 0
      elseif pold >= lo then
        -- The longer window's oldest entry is inside this one, so all of
        -- its entries are.
        used, old = pused, pold
      else
        los = fmt('%d', lo)
        used = call('ZCOUNT', kk, los, '+inf')
      end
      if used > 0 and not old then
        old = num(call('ZRANGE', kk, los, '+inf', 'BYSCORE', 'LIMIT', '0', '1', 'WITHSCORES')[2])
      end
      pused, pold = used, old
      n = n + 1
      out[n] = used
      if used > 0 then
        n = n + 1
        out[n] = old
        if used >= l then
          ok = false
          -- The request fits once the entries up to rank used-l (from the
          -- oldest) have left the window; only that one entry is read.
          local edge = old
          if used > l then
            los = los or fmt('%d', lo)
            edge = num(call('ZRANGE', kk, los, '+inf', 'BYSCORE', 'LIMIT', fmt('%d', used - l), '1', 'WITHSCORES')[2])
          end
          n = n + 1
          out[n] = edge
        end
      end
    end
  end

  local status, suffix = 0, 0
  if ok then
    status = 1
  end
  if ok and mode == 1 then
    -- Phase 2 adds the member to every key. A member that is already
    -- present (two processes sharing a snowflake node) must not make the
    -- request count less than once: undo the keys added so far and retry
    -- with a suffixed member.
    ts = ts or fmt('%d', t)
    local m = member
    while true do
      local clash = 0
      for k = key + 1, key + nk do
        if call('ZADD', KEYS[k], 'NX', ts, m) == 0 then
          clash = k
          break
        end
      end
      if clash == 0 then
        break
      end
      for k = key + 1, clash - 1 do
        call('ZREM', KEYS[k], m)
      end
      suffix = suffix + 1
      if suffix > 32 then
        status, suffix = 2, 0
        break
      end
      m = member .. '.' .. suffix
    end

    if status == 1 then
      for k = 1, nk do
        local kk = KEYS[key + k]
        local kq = counts[3 * k]
        -- The longest window comes first.
        local long = counts[3 * k - 1]
        local ls = a[kq + kfields]
        -- Bookkeeping runs at the first admission of each epoch of length
        -- I: the whole window for a quiet key, an eighth of it for a busy
        -- one, whose stale entries would otherwise cost memory. ZADD CH
        -- reports a new epoch (or, after the clock went back, an older
        -- one, whose admissions need the deadline renewed all the same).
        local I, is = long, ls
        if counts[3 * k - 2] >= BUSY then
          I = math.ceil(long / 8)
          if json then
            is = I
          else
            is = a[kq + 1]
          end
        end
        local e = -(EPOCH + floor(t / I))
        local em = 'e' .. is
        if call('ZADD', kk, 'CH', fmt('%d', e), em) == 1 then
          -- Entries must outlive the longest window of every group using
          -- the key, not only this one's: the retention is the largest
          -- longest window seen, kept in 'r'.
          local r = call('ZSCORE', kk, 'r')
          local ret = long
          if r and -num(r) >= ret then
            ret = -num(r)
          else
            call('ZADD', kk, -ret, 'r')
            if r then
              -- A grown retention must reach the deadline of every group's
              -- next admission: drop all epoch markers, so each group's
              -- next admission runs the bookkeeping.
              call('ZREMRANGEBYSCORE', kk, '-inf', -EPOCH)
              call('ZADD', kk, e, em)
            end
          end
          call('ZREMRANGEBYSCORE', kk, 0, t - ret)
          -- Every admission of this epoch happens before t+I, and its
          -- entries must live for ret after it. GT: never shorten a
          -- deadline another group's epoch relies on. GT keeps a key
          -- without a deadline as it is: a new key (no 'r' yet) gets a
          -- plain PEXPIRE, and one that lost its deadline (PERSIST, a
          -- restore without TTL) gets it back with NX.
          local ttl = math.ceil((ret + I) / 1000) + 1
          if not r then
            call('PEXPIRE', kk, ttl)
          elseif call('PEXPIRE', kk, ttl, 'GT') == 0 then
            call('PEXPIRE', kk, ttl, 'NX')
          end
        end
      end
    end
  end
  out[code] = status + 4 * suffix
  p = q
  key = key + nk
end

if not json then
  return out
end
for i = 1, n do
  out[i] = fmt('%d', out[i])
end
return table.concat(out, ' ')
