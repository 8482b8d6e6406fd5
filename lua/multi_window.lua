-- multi_window.lua: exact multi-window sliding logs in sorted sets.
--
-- The engine package documentation (engine/doc.go) is the specification;
-- this comment summarises the wire format and the cost-driven choices.
--
-- ARGV[1] is a JSON array of integers and member strings:
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
-- most of what a decision costs. Hence: scores are passed through as Redis
-- formats them, numbers are converted to strings once, shorter windows
-- are derived from longer ones where possible (reading a key's few entries
-- whole in one call was measured and is no cheaper: converting a reply
-- element costs about half a redis.call), and the per-key bookkeeping (retention, trim, expiry) runs once per epoch
-- instead of once per admission (see engine/doc.go).

local a = cjson.decode(ARGV[1])
local t = a[1]
local call = redis.call
local fmt = string.format
local out = {}
if t == 0 then
  local now = call('TIME')
  out[1], out[2] = now[1], now[2]
  t = tonumber(now[1]) * 1000000 + tonumber(now[2])
else
  out[1] = tostring(math.floor(t / 1000000))
  out[2] = tostring(t % 1000000)
end
-- redis.call turns number arguments into strings with %.17g, which costs
-- more than the command itself for ZCOUNT; numbers used more than once are
-- formatted here, once (%d: exact for integers below 2^53, unlike Lua's
-- own 14-digit conversion).
local ts = fmt('%d', t)

-- Markers are members with negative scores, which no window [t-W+1, t]
-- (t > W) counts and no trim (from 0) removes: 'r' scored -retention, and
-- per epoch length I a member 'e'..I scored -(EPOCH + epoch number).
local EPOCH = 2251799813685248 -- 2^51, below every -retention
local BUSY = 64 -- a key with BUSY entries in its longest window is trimmed 8 times per window

-- str memoizes tostring for the small integers that make most of a reply
-- (large keys would make some Lua implementations grow the array part).
local strs = {}
local function str(v)
  if v >= 1024 then
    return tostring(v)
  end
  local s = strs[v]
  if not s then
    s = tostring(v)
    strs[v] = s
  end
  return s
end

local n = 2 -- last index written in out
local p = 3 -- next index to read in a
local key = 0 -- KEYS used by the previous ops
local counts = {} -- per key of the op: entries in its longest window

for _ = 1, a[2] do
  local mode, member, nk = a[p], a[p + 1], a[p + 2]
  p = p + 3
  local code = n + 1
  n = n + 1
  local ok = true
  local q = p
  for k = 1, nk do
    local kk = KEYS[key + k]
    local nw = a[q]
    q = q + 1
    -- Scores are integers, so the window (t-W, t] is [t-W+1, t]; that
    -- also avoids formatting exclusive bounds (Lua's number-to-string
    -- conversion keeps 14 digits; redis.call's keeps all). The upper
    -- bound is +inf, not t: after the server's clock went back (an NTP
    -- step, a failover to a replica whose clock is behind) entries
    -- admitted "after" t must still count, or the window over-admits.
    local lo = t - a[q] + 1
    local los = fmt('%d', lo)
    local all = call('ZCOUNT', kk, los, '+inf')
    counts[k] = all
    local pused, pold = -1, nil
    for wi = 1, nw do
      local w, l = a[q], a[q + 1]
      q = q + 2
      if wi > 1 then
        lo = t - w + 1
        los = nil
      end
      local used, old
      if wi == 1 then
        used = all
      elseif pused == 0 then
        used = 0
      elseif tonumber(pold) >= lo then
        -- The longer window's oldest entry is inside this one, so all of
        -- its entries are.
        used, old = pused, pold
      else
        los = fmt('%d', lo)
        used = call('ZCOUNT', kk, los, '+inf')
      end
      if used > 0 and not old then
        los = los or fmt('%d', lo)
        old = call('ZRANGE', kk, los, '+inf', 'BYSCORE', 'LIMIT', '0', '1', 'WITHSCORES')[2]
      end
      pused, pold = used, old
      n = n + 1
      out[n] = str(used)
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
            edge = call('ZRANGE', kk, los, '+inf', 'BYSCORE', 'LIMIT', str(used - l), '1', 'WITHSCORES')[2]
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
      q = p
      for k = 1, nk do
        local kk = KEYS[key + k]
        local long = a[q + 1] -- the longest window comes first
        q = q + 1 + 2 * a[q]
        -- Bookkeeping runs at the first admission of each epoch of length
        -- I: the whole window for a quiet key, an eighth of it for a busy
        -- one, whose stale entries would otherwise cost memory. ZADD CH
        -- reports a new epoch (or, after the clock went back, an older
        -- one, whose admissions need the deadline renewed all the same).
        local I = long
        if counts[k] >= BUSY then
          I = math.ceil(long / 8)
        end
        local e = -(EPOCH + math.floor(t / I))
        local em = 'e' .. I
        if call('ZADD', kk, 'CH', e, em) == 1 then
          -- Entries must outlive the longest window of every group using
          -- the key, not only this one's: the retention is the largest
          -- longest window seen, kept in 'r'.
          local r = call('ZSCORE', kk, 'r')
          local ret = long
          if r and -tonumber(r) >= ret then
            ret = -tonumber(r)
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
  out[code] = str(status + 4 * suffix)
  p = q
  key = key + nk
end

return table.concat(out, ' ')
