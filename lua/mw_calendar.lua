-- mw_calendar.lua: calendar keys (see Calendars in multi_window.lua's
-- header): read_calendar reads an op's period (calendar_period finds it
-- among the boundaries, cal_read reads its count through cal_memo), the
-- call's pending counts are written by flush_cal, and finish_calendar is
-- a finish op's step. CAL_BOUNDS is the number of period boundaries of a
-- calendar key; CAL_MARGIN (ms) keeps its counter alive that long past
-- its period.

-- span_end, span_start and span_stop: the end of the engine's current
-- period among the last calendar key's boundaries that held t (b3,
-- args[q + 2] in calendar_period), its start (b2, args[q + 1]) and its
-- end as a number: the ops of a call mostly send the same boundaries,
-- which are then parsed once.

-- calendar_period returns the start (as its argument) and the end of the
-- period that holds t among the boundaries at args[q ..], or nothing.
function calendar_period(q)
  if span_end == args[q + 2] and span_start == args[q + 1] then
    return span_start, span_stop
  end
  -- The current period first: [b2, b3).
  local lo, hi = num(args[q + 1]), num(args[q + 2])
  if t >= lo and t < hi then
    span_end, span_start, span_stop = args[q + 2], args[q + 1], hi
    return span_start, hi
  end
  for j = q, q + (${CAL_BOUNDS} - 2), 2 do
    lo, hi = num(args[j]), num(args[j + 1])
    if t >= lo and t < hi then
      return args[j], hi
    end
  end
end

-- cal_migrate turns calendar key key of the earlier format, a string
-- 'START:COUNT' (slidelimit before the hash), into a hash of one field
-- with the same count and expiry: an upgrade keeps the period's count.
function cal_migrate(key)
  local v, ttl = call('GET', key), call('PTTL', key)
  call('DEL', key)
  local colon = v and string.find(v, ':', 1, true)
  if colon then
    call('HSET', key, string.sub(v, 1, colon - 1), string.sub(v, colon + 1))
    if ttl > 0 then
      call('PEXPIRE', key, ttl)
    end
  end
end

-- cal_call runs cmd (HGET, or HINCRBY by incr) on field f of calendar key
-- key, which it first migrates when it is of the earlier format (the
-- command fails with WRONGTYPE); any other error is raised as it is.
function cal_call(cmd, key, f, incr)
  local r
  if incr then
    r = redis.pcall(cmd, key, f, incr)
  else
    r = redis.pcall(cmd, key, f)
  end
  if type(r) == 'table' and r.err then
    if not string.find(r.err, 'WRONGTYPE', 1, true) then
      error(r)
    end
    cal_migrate(key)
    if incr then
      return call(cmd, key, f, incr)
    end
    return call(cmd, key, f)
  end
  return r
end

-- cal_memo maps a calendar key that an op of the call read to {start,
-- count, ahead, ttl}: its period's start (as in ARGV), the period's count
-- after the call's admissions so far, what Redis holds beyond count (a
-- tentative increment not admitted, to be taken back; negative: admissions
-- not written yet), and, when one of the call's admissions was the
-- period's first, the expiry to set (else false). Later ops on the key
-- read the count there;
-- flush_cal writes what is pending once, at the end of the call (or
-- before an error reply, or before a finish op adjusts the key): a batch
-- of decisions on a hot subject costs one HINCRBY and one flush, not one
-- of each per decision.

-- cal_fields maps a calendar key to the fields the call's last op on it
-- sent: {start, stop, cost, limit} as numbers (start as in ARGV), then
-- cost, limit and the fourth field as sent. An op sending the same
-- fields, or 'q', reuses them instead of parsing them again (the ops of a
-- batch on a hot subject).

-- flush_cal_key writes memo entry m of calendar key k: what Redis lacks
-- or holds beyond the count (a period left at 0 is deleted), and after a
-- period's first admission the key's expiry, dropping the counts of other
-- periods.
function flush_cal_key(k, m)
  local start, pending = m[1], -m[3]
  if pending ~= 0 then
    if m[2] == 0 then
      call('HDEL', k, start)
    else
      call('HINCRBY', k, start, fmt('%d', pending))
    end
  end
  if m[4] and m[2] > 0 then
    call('PEXPIRE', k, m[4])
    -- Other fields are other periods' counts, or the records of finish
    -- ops ('m' names their period): those of this period stay (the count
    -- fell to 0 and rose again), a retry of their op must find them.
    if call('HLEN', k) > 1 and call('HGET', k, 'm') ~= start then
      for _, f in ipairs(call('HKEYS', k)) do
        if f ~= start then
          call('HDEL', k, f)
        end
      end
    end
  end
  m[3] = 0
end

-- cal_read returns what calendar key key holds in the period that starts
-- at start, from cal_memo or else from Redis, and its memo entry. An
-- allow that fits so far (tentative) adds cost at once (HINCRBY: one call
-- where a read and a write would take two); the memo then marks it
-- pending until the op is admitted (the admission counts it in the memo
-- entry), or taken back by flush_cal.
function cal_read(key, start, cost, cost_arg, tentative)
  cal_memo = cal_memo or {}
  local m = cal_memo[key]
  if m and m[1] == start then
    return m[2], m
  end
  if m then
    flush_cal_key(key, m)
  end
  local used
  if tentative then
    -- cost_arg, the string: redis.call formats a number with %.17g.
    used = cal_call('HINCRBY', key, start, cost_arg) - cost
    m = {start, used, cost, false}
  else
    -- What the period counts: 0 when it holds no count of it.
    local v = cal_call('HGET', key, start)
    used = v and num(v) or 0
    m = {start, used, 0, false}
  end
  cal_memo[key] = m
  return used, m
end

-- flush_cal writes the counters of cal_memo, or only key's when key is
-- given, and forgets them.
function flush_cal(key)
  if not cal_memo then
    return
  end
  for k, m in pairs(cal_memo) do
    if not key or k == key then
      flush_cal_key(k, m)
      cal_memo[k] = nil
    end
  end
end

-- read_calendar reads calendar key key (see Calendars) for an op that
-- adds its cost at once when tentative (see cal_read); instead of the
-- next index it returns nil and the error when t lies outside the key's
-- periods. key_state[at], the period's start, keeps it out of add_member
-- and the bookkeeping; -2 marks it for the admission to count
-- key_state[at - 1], the op's cost, in its memo entry, and
-- key_state[at - 3] is the expiry a period's first admission sets.
function read_calendar(key, q, at, tentative)
  local key_state = key_state_table
  cal_fields = cal_fields or {}
  local f = cal_fields[key]
  local next_q = q + 2
  if args[q + 1] ~= 'q' then
    next_q = q + 5
    if args[q + 1] == 'P' then
      next_q = q + (4 + ${CAL_BOUNDS})
    end
    -- A 'Q' field i names the boundaries; a 'P' key sends its own.
    if not (args[q + 1] == 'Q' and f and f[7] == args[q + 4] and f[5] == args[q + 2] and f[6] == args[q + 3]) then
      local bounds = q + 4
      if args[q + 1] == 'Q' then
        bounds = num(args[q + 4])
      end
      local start, stop = calendar_period(bounds)
      if not start then
        return nil, 'ERR slidelimit: time outside the calendar boundaries of ' .. key
      end
      f = {start, stop, conf_num(args[q + 2]), conf_num(args[q + 3]), args[q + 2], args[q + 3], args[q + 4]}
      cal_fields[key] = f
    end
  elseif not f then
    return nil, 'ERR slidelimit: calendar key without fields ' .. key
  end
  local start, stop, cost = f[1], f[2], f[3]
  local used = cal_read(key, start, cost, f[5], tentative)
  n = n + 1
  reply[n] = used
  n = n + 1
  reply[n] = stop - t
  -- The period's first admission sets the expiry; later ones keep it.
  key_state[at - 3] = used == 0 and fmt('%d', ceil((stop - t) / 1000) + ${CAL_MARGIN})
  key_state[at - 2], key_state[at - 1], key_state[at] = -2, cost, start
  return next_q, used + cost <= f[4]
end

-- finish_calendar adds delta to the count of the period starting at start
-- in calendar key key (fields 'A', start, delta from args[q]; see
-- Calendars) once per member (its record) with one HINCRBY, which also
-- tells what the period held: a
-- period without a field (it held 0: it is over) is left without one,
-- and a count never falls below 0 (at 0 the field is deleted).
function finish_calendar(key, q, member)
  flush_cal(key)
  local start = args[q + 1]
  if start == '' then
    return 0
  end
  -- A counter keeps no member to remove: the op's record makes it run
  -- once, though a timed-out call that Redis ran is retried.
  local record = '-' .. member
  if cal_call('HSETNX', key, record, '1') == 0 then
    return 0
  end
  local after = cal_call('HINCRBY', key, start, args[q + 2])
  local before = after - num(args[q + 2])
  if before <= 0 then
    -- The period is over: no count, no record (an emptied hash is gone).
    call('HDEL', key, start, record)
    return 0
  end
  if after <= 0 then
    call('HDEL', key, start)
  end
  call('HSET', key, 'm', start)
  return 1
end
