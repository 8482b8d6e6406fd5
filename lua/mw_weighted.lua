-- mw_weighted.lua: weighted keys (keys of limiters with a cost or a
-- grain) at an admission; see Weighted keys in multi_window.lua's header.
-- weigh reads a key's windows (weighted_edge finds a full window's edge),
-- admit_weighted adds the request's entry and merges.

-- weigh reads the nwin windows of weighted key key, whose cost is at
-- args[q] and windows after it, into the reply like count_windows. It
-- returns the index of the next field, whether every window has room,
-- and the key's state for admit_weighted: newest total, newest score
-- (nil when the key is empty), cost, the index of its first window and
-- the number of windows.
function weigh(key, q, nwin)
  local cost = conf_num(args[q])
  q = q + 1
  local first, fits = q, true
  local newest_total, newest_score = 0, nil
  -- Entries have scores >= 0 and markers negative ones, so the key's
  -- last rank is its newest entry unless it holds only markers.
  local top = call('ZRANGE', key, '-1', '-1', 'WITHSCORES')
  if top[1] and byte(top[2]) ~= ${MINUS} then
    newest_total, newest_score = num(string.sub(top[1], 1, 16)), num(top[2]) or sci(top[2])
  end
  for w = 1, nwin do
    -- The window's sum is the newest total minus the total of the last
    -- entry before the window (0 when there is none): entries after t
    -- (the clock went back) count, as in count keys. That entry and
    -- the window's oldest are neighbours in rank, read in one call.
    local used, first_rank, pair = newest_total, 0, nil
    if newest_total > 0 then
      local lo = t - conf_num(args[q]) + 1
      local lo_s = lo_text[w] -- the memo of count_windows
      if lo_num[w] ~= lo then
        lo_s = fmt('%d', lo)
        lo_num[w], lo_text[w] = lo, lo_s
      end
      first_rank = call('ZCOUNT', key, '-inf', '(' .. lo_s)
      if first_rank > 0 then
        pair = call('ZRANGE', key, dec(first_rank - 1), dec(first_rank), 'WITHSCORES')
        if byte(pair[2]) ~= ${MINUS} then
          used = newest_total - num(string.sub(pair[1], 1, 16))
        end
      else
        pair = call('ZRANGE', key, '0', '0', 'WITHSCORES')
        pair[3], pair[4] = pair[1], pair[2]
      end
    end
    n = n + 1
    reply[n] = used
    if used > 0 then
      n = n + 1
      reply[n] = num(pair[4]) or sci(pair[4])
      local limit = conf_num(args[q + 1])
      if used + cost > limit then
        fits, n = false, n + 1
        reply[n] = weighted_edge(key, newest_total + cost - limit, first_rank, pair[3], pair[4], top[2])
      end
    end
    q = q + 3
  end
  return q, fits, {newest_total, newest_score, cost, first, nwin}
end

-- weighted_edge returns the score of the entry that must leave a window
-- of weighted key key for the request to fit: the first whose total
-- reaches need, found by a binary search over ranks between the window's
-- oldest entry (rank first_rank, member first_member, scored first_score)
-- and the newest (scored newest_score).
function weighted_edge(key, need, first_rank, first_member, first_score, newest_score)
  if num(string.sub(first_member, 1, 16)) >= need then
    return num(first_score) or sci(first_score)
  end
  local edge_score = newest_score
  local lo_rank, hi_rank = first_rank + 1, call('ZCARD', key) - 1
  while lo_rank < hi_rank do
    local mid = floor((lo_rank + hi_rank) / 2)
    local rank = dec(mid)
    local entry = call('ZRANGE', key, rank, rank, 'WITHSCORES')
    if num(string.sub(entry[1], 1, 16)) >= need then
      hi_rank, edge_score = mid, entry[2]
    else
      lo_rank = mid + 1
    end
  end
  return num(edge_score) or sci(edge_score)
end

-- admit_weighted adds member m to weighted key key (state: from weigh),
-- then merges entries (see Weighted keys in the header): in each tier j
-- (entries older than the windows shorter than W_j, still inside W_j), an
-- entry whose successor lies in the same grain of tier j is deleted, so
-- that the successor (later, and carrying the larger total) stands for
-- both. Only the entries that reached a tier since the previous admission
-- (and their neighbours in the same grain) are looked at, at most
-- MERGE_SCAN per tier. It returns an error reply, or nil.
function admit_weighted(key, state, m)
  local newest_total, newest_score, cost, first, nwin = state[1], state[2], state[3], state[4], state[5]
  if newest_total + cost > ${MAX_TOTAL} then
    return redis.error_reply('ERR slidelimit: running total above 2^53 in ' .. key)
  end
  local score = t
  if newest_score and newest_score > t then
    score = newest_score -- scores never decrease along totals; the entry leaves later
  end
  call('ZADD', key, fmt('%d', score), fmt('%016d', newest_total + cost) .. ':' .. m)
  if not newest_score then
    return nil
  end
  local shorter = 0 -- the next shorter window's period: tier j starts there
  for w = nwin, 1, -1 do
    local q = first + 3 * (w - 1)
    local period, grain = conf_num(args[q]), conf_num(args[q + 2])
    if grain > 0 then
      local hi = '+inf'
      if shorter > 0 then
        hi = fmt('%d', t - shorter)
      end
      local lo = t - period + 1
      if newest_score - shorter - grain > lo then
        lo = newest_score - shorter - grain
      end
      local entries = call('ZRANGE', key, hi, fmt('%d', lo), 'BYSCORE', 'REV', 'LIMIT', '0', '${MERGE_SCAN}', 'WITHSCORES')
      local merged = {}
      for i = 3, #entries, 2 do
        local a, b = entries[i + 1], entries[i - 1]
        if floor((num(a) or sci(a)) / grain) == floor((num(b) or sci(b)) / grain) then
          merged[#merged + 1] = entries[i]
        end
      end
      if #merged > 0 then
        call('ZREM', key, unpack(merged))
      end
    end
    shorter = period
  end
  return nil
end
