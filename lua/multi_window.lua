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
-- microseconds; the windows of a key come longest first. A weighted key
-- (a limiter with a cost or a grain, see engine/doc.go) is given as
--   -nwin, cost, then per window: period, limit, grain
-- with the grains of its tiers in µs (0: exact); its used is the window's
-- summed cost, and edge is present when used + cost > limit.
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
--   window: period, limit (a weighted key: -nwin, busy, cost, then per
--   window: period, limit, grain)
-- where an empty member means peek, and busy is the key's epoch length
-- once it is busy (ceil(longest period / 8), see below), passed as a
-- string so that the marker's name needs no number formatting. Its reply
-- is an array of integers in the order described above (oldest and edge
-- as plain scores). The JSON one is the format described above, with its
-- string reply.
local a = ARGV
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
local weighted = {} -- per key of the op: false for a count key, the state of a weighted one (see weigh)
local kfields = 2 -- per-key fields before the windows: nwin, busy
p = 2

-- Weighted keys (keys of limiters with a cost or a grain, see the header
-- below): a member is its running total of cost, 16 digits, then ':' and
-- the request's member; scores never decrease along totals.
local TOTAL = 9007199254740991 -- 2^53 - 1: totals stay exact in doubles
local function total(m)
  return num(string.sub(m, 1, 16))
end

-- weigh reads the windows of weighted key kk (fields from a[q]: cost,
-- then per window period, limit, grain) into out, like the count path, and
-- returns the next field's index, whether every window has room, and the
-- key's state for the admission: newest total, newest score (nil when the
-- key is empty), cost, the first window's index in a, and the number of
-- windows.
local function weigh(kk, q, nw)
  local cost = num(a[q])
  q = q + 1
  local wq = q
  local ok = true
  local nt, ns = 0, nil
  local top = call('ZRANGE', kk, '+inf', '0', 'BYSCORE', 'REV', 'LIMIT', '0', '1', 'WITHSCORES')
  if top[1] then
    nt, ns = total(top[1]), num(top[2])
  end
  for _ = 1, nw do
    local lo, l = t - num(a[q]) + 1, num(a[q + 1])
    q = q + 3
    local used, old, edge = 0, nil, nil
    if nt > 0 then
      local los = fmt('%d', lo)
      -- The window's sum is the newest total minus the total of the last
      -- entry before the window (0 when there is none): entries after t
      -- (the clock went back) count, as in count keys.
      local b = call('ZRANGE', kk, '(' .. los, '0', 'BYSCORE', 'REV', 'LIMIT', '0', '1')
      used = nt
      if b[1] then
        used = nt - total(b[1])
      end
      if used > 0 then
        local f = call('ZRANGE', kk, los, '+inf', 'BYSCORE', 'LIMIT', '0', '1', 'WITHSCORES')
        old = num(f[2])
        if used + cost > l then
          ok = false
          -- The request fits once the entries up to the first whose total
          -- reaches need have left the window: a binary search over ranks
          -- between the window's oldest entry and the newest (markers
          -- have negative scores, so entries take the last ranks).
          local need = nt + cost - l
          local es = top[2]
          local lr, hr = 0, 0
          if total(f[1]) >= need then
            es = f[2]
          else
            lr, hr = call('ZRANK', kk, f[1]) + 1, call('ZCARD', kk) - 1
          end
          while lr < hr do
            local mid = floor((lr + hr) / 2)
            local m = call('ZRANGE', kk, mid, mid, 'WITHSCORES')
            if total(m[1]) >= need then
              hr, es = mid, m[2]
            else
              lr = mid + 1
            end
          end
          edge = num(es)
        end
      end
    end
    n = n + 1
    out[n] = used
    if old then
      n = n + 1
      out[n] = old
      if edge then
        n = n + 1
        out[n] = edge
      end
    end
  end
  return q, ok, {nt, ns, cost, wq, nw}
end

-- admit adds member m to weighted key kk (w: its state from weigh), then
-- merges entries (see engine/doc.go): in each tier j (entries older than
-- the windows shorter than W_j, still inside W_j), an entry whose
-- successor lies in the same grain of tier j is deleted, so that the
-- successor (later, and carrying the larger total) stands for both. Only
-- the entries that reached a tier since the previous admission (and their
-- neighbours in the same grain) are looked at, at most 257 per tier.
local function admit(kk, w, m)
  local nt, ns, cost, wq, nw = w[1], w[2], w[3], w[4], w[5]
  if nt + cost > TOTAL then
    return redis.error_reply('ERR slidelimit: running total above 2^53 in ' .. kk)
  end
  local s = t
  if ns and ns > t then
    s = ns -- scores never decrease along totals; the entry leaves later
  end
  call('ZADD', kk, fmt('%d', s), fmt('%016d', nt + cost) .. ':' .. m)
  if not ns then
    return nil
  end
  local prev = 0 -- the next shorter window's period: tier j starts there
  for wi = nw, 1, -1 do
    local wp = wq + 3 * (wi - 1)
    local per, g = num(a[wp]), num(a[wp + 2])
    if g > 0 then
      local hi = '+inf'
      if prev > 0 then
        hi = fmt('%d', t - prev)
      end
      local lo = t - per + 1
      if ns - prev - g > lo then
        lo = ns - prev - g
      end
      local es = call('ZRANGE', kk, hi, fmt('%d', lo), 'BYSCORE', 'REV', 'LIMIT', '0', '257', 'WITHSCORES')
      local del = {}
      for i = 3, #es, 2 do
        if floor(num(es[i + 1]) / g) == floor(num(es[i - 1]) / g) then
          del[#del + 1] = es[i]
        end
      end
      if #del > 0 then
        call('ZREM', kk, unpack(del))
      end
    end
    prev = per
  end
  return nil
end

while p <= #a do
  local mode, member, nk
  member, nk = a[p], num(a[p + 1])
  mode = 1
  if member == '' then
    mode = 2
  end
  p = p + 2
  n = n + 1
  local code = n
  local ok = true
  local q = p
  for k = 1, nk do
    local kk = KEYS[key + k]
    local nw = num(a[q])
    local kq = q
    weighted[k] = false
    if nw < 0 then
      local wok, w
      q, wok, w = weigh(kk, q + kfields, -nw)
      ok = ok and wok
      weighted[k] = w
      counts[3 * k - 2], counts[3 * k - 1], counts[3 * k] = BUSY, num(a[w[4]]), kq
      nw = 0
    else
      q = q + kfields
    end
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
        if not weighted[k - key] and call('ZADD', KEYS[k], 'NX', ts, m) == 0 then
          clash = k
          break
        end
      end
      if clash == 0 then
        break
      end
      for k = key + 1, clash - 1 do
        if not weighted[k - key] then
          call('ZREM', KEYS[k], m)
        end
      end
      suffix = suffix + 1
      if suffix > 32 then
        status, suffix = 2, 0
        break
      end
      m = member .. '.' .. suffix
    end

    if status == 1 then
      -- Weighted members hold their running total, so they are unique:
      -- they are added once the member's suffix is known.
      for k = 1, nk do
        if weighted[k] then
          local err = admit(KEYS[key + k], weighted[k], m)
          if err then
            return err
          end
        end
      end
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
          is = a[kq + 1]
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
          if not weighted[k] then
            call('ZREMRANGEBYSCORE', kk, 0, t - ret)
          else
            -- A weighted key keeps the newest entry it could trim: its
            -- total is the base of every window's sum.
            local b = call('ZRANGE', kk, fmt('%d', t - ret), '0', 'BYSCORE', 'REV', 'LIMIT', '0', '1', 'WITHSCORES')
            if b[2] then
              call('ZREMRANGEBYSCORE', kk, 0, '(' .. b[2])
            end
          end
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

return out
