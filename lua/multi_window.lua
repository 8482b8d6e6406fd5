-- multi_window.lua: exact multi-window sliding logs in sorted sets.
--
-- The engine package documentation (engine/doc.go) is the specification;
-- this comment only summarises the wire format.
--
-- ARGV[1] is a JSON array of integers and member strings:
--   t, nops, op...
-- t is the decision time in microseconds, or 0 to use the server's TIME.
-- Each op is
--   mode, member, nkeys, then per key: nwin, then per window: period, limit
-- with mode 1 = allow (check every window, admit in every key or none),
-- 2 = peek (check only) and 3 = rollback (remove member from nkeys keys;
-- a rollback op carries no windows). An op uses the next nkeys KEYS.
-- Periods are microseconds.
--
-- The reply is one string of space-separated integers: the time as seconds
-- and microseconds, then per op
--   allow/peek: status, suffix, then per key and window: used, reset, wait
--   rollback:   number of entries removed
-- status is 1 when admitted (or, for peek, when the request would be), 0
-- when denied and 2 when no unique member was found (nothing written).
-- used, reset and wait describe the window before this op wrote anything.
-- All numbers printed stay below 1e14, so Lua's %.14g prints them exactly.

local a = cjson.decode(ARGV[1])
local t = a[1]
local out = {}
if t == 0 then
  local now = redis.call('TIME')
  out[1], out[2] = now[1], now[2]
  t = tonumber(now[1]) * 1000000 + tonumber(now[2])
else
  out[1] = math.floor(t / 1000000)
  out[2] = t % 1000000
end

local n = 2 -- last index written in out
local p = 3 -- next index to read in a
local key = 0 -- KEYS used by the previous ops

for _ = 1, a[2] do
  local mode, member, nk = a[p], a[p + 1], a[p + 2]
  p = p + 3
  if mode == 3 then
    local removed = 0
    for k = key + 1, key + nk do
      removed = removed + redis.call('ZREM', KEYS[k], member)
    end
    n = n + 1
    out[n] = removed
  else
    -- Phase 1 reads every window. Scores are integers, so (t-W, t] is
    -- [t-W+1, t], which avoids formatting exclusive bounds as strings
    -- (Lua's number-to-string conversion keeps only 14 digits).
    local status = n + 1
    n = n + 2
    local ok = true
    local q = p
    for k = key + 1, key + nk do
      local kk = KEYS[k]
      local nw = a[q]
      q = q + 1
      for _ = 1, nw do
        local w, l = a[q], a[q + 1]
        q = q + 2
        local lo = t - w + 1
        local used = redis.call('ZCOUNT', kk, lo, t)
        local reset, wait = 0, 0
        if used > 0 then
          local o = redis.call('ZRANGE', kk, lo, t, 'BYSCORE', 'LIMIT', 0, 1, 'WITHSCORES')
          reset = tonumber(o[2]) + w - t
          if used >= l then
            ok = false
            -- The request fits once the entries up to rank used-l (from
            -- the oldest) have left the window.
            if used > l then
              o = redis.call('ZRANGE', kk, lo, t, 'BYSCORE', 'LIMIT', used - l, 1, 'WITHSCORES')
            end
            wait = tonumber(o[2]) + w - t
          end
        end
        out[n + 1], out[n + 2], out[n + 3] = used, reset, wait
        n = n + 3
      end
    end

    local code, suffix = 0, 0
    if ok then
      code = 1
    end
    if ok and mode == 1 then
      -- Phase 2 adds the member to every key. A member that is already
      -- present (two processes sharing a snowflake node) must not make
      -- the request count less than once: undo the keys added so far and
      -- retry with a suffixed member.
      local m = member
      while true do
        local clash = 0
        for k = key + 1, key + nk do
          if redis.call('ZADD', KEYS[k], 'NX', t, m) == 0 then
            clash = k
            break
          end
        end
        if clash == 0 then
          break
        end
        for k = key + 1, clash - 1 do
          redis.call('ZREM', KEYS[k], m)
        end
        suffix = suffix + 1
        if suffix > 32 then
          code, suffix = 2, 0
          break
        end
        m = member .. '.' .. suffix
      end

      if code == 1 then
        -- Retention: entries must outlive the longest window of every
        -- group using the key, not only this one, so the key remembers
        -- the largest retention seen in the member 'r' with score
        -- -retention, which no window (t-W, t] with t > W ever counts
        -- and which the trim's lower bound of 0 never removes.
        q = p
        for k = key + 1, key + nk do
          local kk = KEYS[k]
          local nw = a[q]
          q = q + 1
          local ret = 0
          for _ = 1, nw do
            if a[q] > ret then
              ret = a[q]
            end
            q = q + 2
          end
          local r = redis.call('ZSCORE', kk, 'r')
          if r and -tonumber(r) >= ret then
            ret = -tonumber(r)
          else
            redis.call('ZADD', kk, -ret, 'r')
          end
          redis.call('ZREMRANGEBYSCORE', kk, 0, t - ret)
          -- ret only grows while the key lives, so this never shortens a
          -- deadline another group relies on.
          redis.call('PEXPIRE', kk, math.ceil(ret / 1000))
        end
      end
    end
    out[status], out[status + 1] = code, suffix
    p = q
  end
  key = key + nk
end

return table.concat(out, ' ')
