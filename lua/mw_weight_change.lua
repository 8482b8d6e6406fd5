-- mw_weight_change.lua: a finish op's change of a weighted key (see
-- Weighted changes in multi_window.lua's header). finish_weight runs
-- change_newest, for the key's newest entry (the common case), then
-- settle_entry, for a settlement behind later entries, and else
-- change_weight, which reads the key and finds the entry (find_entry),
-- then rewrites it and the later ones (rewrite_entry) or charges a debt
-- to the newest (charge_newest). WEIGHT_MOVE bounds the later entries a
-- change rewrites; WEIGHT_READ (2 * WEIGHT_MOVE + 4) the entries it reads
-- from its decision time on: found among them with more than WEIGHT_MOVE
-- after it, a request is changed as with more than WEIGHT_MOVE.

-- finish_weight runs the change in mode mode of weighted key key whose
-- fields start at args[q] for member ms (see Weighted changes). The
-- decision time at is read only where needed: the common change, of the
-- key's newest entry, needs no time.
function finish_weight(key, q, mode, ms)
  local delta, cost = args[q + 1] + 0, args[q + 3]
  cost = conf[cost] or conf_num(cost)
  if type(ms) == 'string' then
    local changed, y, ys = change_newest(key, ms, delta, mode, cost)
    if changed then
      return changed
    end
    if mode == 's' and args[q + 2] ~= '0' and delta > -cost then
      changed = settle_entry(key, ms, args[q + 2], delta, y, ys)
    elseif y then
      call('ZADD', key, ys, y)
    end
    if changed then
      return changed
    end
  end
  local grain = 0
  if mode == 'g' then
    grain = num(args[q + 4])
  end
  return change_weight(key, delta, mode, num(args[q + 2]), grain, ms, cost)
end

-- change_newest changes by delta, in mode md (see Weighted changes), the
-- request whose member is m in weighted key key when its entry is the
-- key's newest, as a request finished soon after its admission mostly is:
-- ZPOPMAX reads and removes it in one call, and ZADD adds it back renamed
-- with its new total (a debt or a refund above -cost: two calls; else a
-- read of the entry before tells what is left of its weight). It returns
-- what change_weight returns, or when the newest entry is another
-- request's, nil, that entry and its score, still popped: the caller puts
-- it back, or renames it as a later entry (see settle_entry). A weighted
-- key that held an entry holds markers, so the pop never empties it
-- (which would lose its expiry).
function change_newest(key, m, delta, md, cost)
  local top = call('ZPOPMAX', key)
  local x, score = top[1], top[2]
  if not x then
    return nil
  end
  if byte(score) == ${MINUS} then
    call('ZADD', key, score, x) -- a marker: the key holds no entry
    return nil
  end
  local rest = string.sub(x, 18)
  if rest ~= m then
    if rest == m .. '!' then
      call('ZADD', key, score, x)
      return 0 -- settled: neither settled again nor given back
    end
    return nil, x, score
  end
  local xt = string.sub(x, 1, 16)
  if ARITH_DEC then
    xt = xt + 0
  else
    xt = num(xt)
  end
  -- c: the change of the request's weight, never below minus that weight,
  -- whose base is the entry before (its weight is at least cost).
  local c, prev = delta, -1
  if delta <= -cost then
    prev = 0
    local below = call('ZRANGE', key, '-1', '-1', 'WITHSCORES')
    if below[1] and string.byte(below[2]) ~= ${MINUS} then
      prev = num(string.sub(below[1], 1, 16))
    end
    c = math.max(delta, prev - xt)
  end
  if c > 0 and xt + c > ${MAX_TOTAL} then
    call('ZADD', key, score, x)
    return 2
  end
  if xt + c > prev then
    -- One format makes the name, where concatenations would make a string
    -- each.
    if md == 'r' then
      call('ZADD', key, score, fmt('%016d:-', xt + c)) -- it stands for merged requests
    else
      call('ZADD', key, score, fmt('%016d:%s!', xt + c, m))
    end
  end
  return 1
end

-- settle_entry settles by delta (> -cost: the entry keeps a weight) the
-- request whose member is m in weighted key key, admitted at at (as
-- sent: a ZRANGE bound needs no number), whose
-- entry is not the newest: y, popped by change_newest, scored ys (nil
-- when the key held no entry). When the entries from at on, read in one
-- call, hold the request's entry and with y at most WEIGHT_MOVE after it,
-- it makes the change change_weight would: the request's entry, each
-- later one and y get their new totals, y without another removal, so a
-- settlement costs no more calls than a read first would. It returns nil
-- for every other case (y put back: change_weight reads again), else as
-- change_weight.
function settle_entry(key, m, at, delta, y, ys)
  local es = call('ZRANGE', key, at, '+inf', 'BYSCORE', 'LIMIT', '0', '${WEIGHT_READ}', 'WITHSCORES')
  local done, found, r = m .. '!', nil, nil
  if #es < 2 * ${WEIGHT_READ} then -- else more follow
    for i = 1, #es, 2 do
      local rest = string.sub(es[i], 18)
      if rest == done then
        r = 0
        break
      end
      if rest == m then
        found = i
        break
      end
    end
  end
  local later = 0
  if found then
    later = (#es - found - 1) / 2
    if y then
      later = later + 1
    end
  end
  local newest = y or es[#es - 1]
  if found and later <= ${WEIGHT_MOVE} and delta > 0 and num(string.sub(newest, 1, 16)) + delta > ${MAX_TOTAL} then
    found, r = nil, 2
  end
  if not found or later > ${WEIGHT_MOVE} then
    if y then
      call('ZADD', key, ys, y)
    end
    return r
  end
  for j = found, #es, 2 do
    local mj = es[j]
    local tag = string.sub(mj, 17)
    if j == found then
      tag = ':' .. done
    end
    call('ZREM', key, mj)
    call('ZADD', key, es[j + 1], fmt('%016d', num(string.sub(mj, 1, 16)) + delta) .. tag)
  end
  if y then
    call('ZADD', key, ys, fmt('%016d', num(string.sub(y, 1, 16)) + delta) .. string.sub(y, 17))
  end
  return 1
end

-- The change change_weight makes, c: key, delta and mode as given; the
-- request's member want1 and its settled name settled1, or sets want and
-- settled of its possible members (an unknown suffix); es: the key's
-- entries (member, score, ...) from first on, or only those from the
-- entry before at on (see WEIGHT_READ); cut: more follow; no_before: es
-- starts at at, without the entry before (delta > -cost: see Weighted
-- changes). A table made per change: the path is rare.

-- change_weight changes the request whose member is ms (or among ms, a
-- list) in weighted key key by delta, in mode mode: 'r' (a removal), 's'
-- (a settlement) or 'g' (a settlement in a key with grained windows, at
-- the decision time at in the coarsest grain grain), whose request was
-- charged cost. It returns 1 when an entry changed, 0 when none did, 2
-- when a debt would take a total above 2^53 (nothing changed).
function change_weight(key, delta, mode, at, grain, ms, cost)
  local c = {key = key, delta = delta, mode = mode}
  if type(ms) == 'string' then
    c.want1, c.settled1 = ms, ms .. '!'
  else
    c.want, c.settled = {}, {}
    for _, m in ipairs(ms) do
      c.want[m] = true
      c.settled[m .. '!'] = true
    end
  end
  if at > 0 then
    -- The request's entry is scored at its decision time at, or later:
    -- read only the entries from at on, and the one before (its total is
    -- the base of the request's weight), not the whole key, which holds
    -- every request of the longest window (a hot subject's thousands). At
    -- most WEIGHT_READ entries: more than WEIGHT_MOVE after the request's
    -- are not rewritten anyway. Not found there (on a cluster whose node
    -- clocks differ it may be scored a little earlier), the whole key is
    -- read, as without at.
    local a = fmt('%d', at)
    local es = call('ZRANGE', key, a, '+inf', 'BYSCORE', 'LIMIT', '0', '${WEIGHT_READ}', 'WITHSCORES')
    c.es, c.cut, c.first = es, #es == 2 * ${WEIGHT_READ}, 1
    c.no_before = delta > -cost and mode ~= 'g'
    if not c.no_before then
      local before = call('ZRANGE', key, '(' .. a, '0', 'BYSCORE', 'REV', 'LIMIT', '0', '1', 'WITHSCORES')
      if before[1] then
        table.insert(es, 1, before[2])
        table.insert(es, 1, before[1])
        c.first = 3
      end
    end
    local r = find_entry(c)
    if r then
      return r
    end
  end
  c.es, c.first, c.cut, c.no_before = call('ZRANGE', key, '0', '+inf', 'BYSCORE', 'WITHSCORES'), 1, false, false
  local r = find_entry(c)
  if r or mode ~= 'g' then
    return r or 0
  end
  local es = c.es
  for i = 1, #es, 2 do
    local score = num(es[i + 1]) or sci(es[i + 1])
    if score >= at then
      if floor(score / grain) == floor(at / grain) then
        return rewrite_entry(c, i, nil)
      end
      break
    end
  end
  if delta > 0 and #es > 0 then
    return charge_newest(c)
  end
  return 0
end

-- find_entry changes the request's entry if c.es holds it and returns
-- what rewrite_entry returns, 0 when it was settled already, nil when es
-- does not say (not there, or cut too close to it).
function find_entry(c)
  local es, want, settled = c.es, c.want, c.settled
  for i = c.first, #es, 2 do
    local rest = string.sub(es[i], 18)
    if rest == c.settled1 or settled and settled[rest] then
      return 0
    end
    if rest == c.want1 or want and want[rest] then
      if c.cut and (#es - i - 1) / 2 <= ${WEIGHT_MOVE} then
        return nil
      end
      if c.mode == 'r' then
        return rewrite_entry(c, i, ':-')
      end
      return rewrite_entry(c, i, ':' .. rest .. '!')
    end
  end
  return nil
end

-- rewrite_entry changes the weight of the entry at index i of c.es by
-- c.delta, renaming it with tag (nil: keep its name). es holds every
-- later entry, or more than WEIGHT_MOVE of them (cut).
function rewrite_entry(c, i, tag)
  local es, key = c.es, c.key
  local m = es[i]
  local prev = 0
  if i > 1 then
    prev = num(string.sub(es[i - 2], 1, 16))
  end
  local xt = num(string.sub(m, 1, 16))
  -- d: the change of the request's weight, never below minus that weight.
  local d = math.max(c.delta, prev - xt)
  if i == 1 and c.no_before then
    -- The weight is at least cost, and delta > -cost.
    prev, d = -1, c.delta
  end
  tag = tag or string.sub(m, 17)
  if (#es - i - 1) / 2 > ${WEIGHT_MOVE} then
    if c.mode == 'r' then
      call('ZREM', key, m)
      return 1
    end
    if d > 0 and charge_newest(c) == 2 then
      return 2
    end
    call('ZREM', key, m)
    call('ZADD', key, es[i + 1], fmt('%016d', xt) .. tag)
    return 1
  end
  if d > 0 and num(string.sub(es[#es - 1], 1, 16)) + d > ${MAX_TOTAL} then
    return 2
  end
  call('ZREM', key, m)
  if xt + d > prev then
    call('ZADD', key, es[i + 1], fmt('%016d', xt + d) .. tag)
  end
  for j = i + 2, #es, 2 do
    local mj = es[j]
    call('ZREM', key, mj)
    call('ZADD', key, es[j + 1], fmt('%016d', num(string.sub(mj, 1, 16)) + d) .. string.sub(mj, 17))
  end
  return 1
end

-- charge_newest adds change c's delta, a debt, to the key's newest entry.
function charge_newest(c)
  local es, m, score = c.es, nil, nil
  if c.cut then
    local top = call('ZRANGE', c.key, '-1', '-1', 'WITHSCORES')
    m, score = top[1], top[2]
  else
    m, score = es[#es - 1], es[#es]
  end
  local total = num(string.sub(m, 1, 16)) + c.delta
  if total > ${MAX_TOTAL} then
    return 2
  end
  call('ZREM', c.key, m)
  call('ZADD', c.key, score, fmt('%016d', total) .. string.sub(m, 17))
  return 1
end
