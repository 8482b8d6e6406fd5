-- mw_count.lua: count keys (see Design, Retention and Epochs in
-- multi_window.lua's header): count_windows reads an op's windows or
-- derives them from the call's previous op on the key (derive_windows),
-- add_member adds the request's member to the count and slot keys, and
-- bookkeep keeps a key's retention, trim and expiry once per epoch. Slot
-- keys (read_slot) and block keys (read_block) are read here too.

-- count_windows reads the nwin windows of count key key, whose fields
-- start at args[q] (the first period), into the reply, or derives them
-- (see derive_windows) from the windows the call's previous op on the key
-- left (q0, r, added: its memo entry, see memo). It returns the index of
-- the next field, whether every window has room, the entries in the
-- longest window and its period, and, when it derived them from an op
-- that added an entry, that op's entries in the longest window. A
-- window's entries are the last used ranks of the key, so its oldest
-- entry and edge are read by rank.
function count_windows(key, q, nwin, q0, r, added)
  if q0 then
    local first_used = derive_windows(key, q, nwin, q0, r, added)
    if first_used then
      if added == 1 then
        return q + 2 * nwin, true, first_used + 1, conf_num(args[q]), first_used
      end
      return q + 2 * nwin, true, first_used, conf_num(args[q])
    end
  end
  local fits, longest_used, longest = true, nil, nil
  local prev_used, prev_oldest = -1, nil
  local room = ${MAX_TOTAL} -- the least room of the windows before the last
  for w = 1, nwin do
    local used, oldest, edge = 0, nil, nil
    -- A window inside a longer one without entries has none either.
    if prev_used ~= 0 then
      local s = args[q]
      local period = conf[s] or conf_num(s)
      longest = longest or period
      local lo = t - period + 1
      if prev_oldest and prev_oldest >= lo then
        -- The longer window's oldest entry is inside this one, so all of
        -- its entries are.
        used, oldest = prev_used, prev_oldest
      else
        -- The memo of lo_num and lo_text, and dec, inline.
        local lo_s = lo_text[w]
        if lo_num[w] ~= lo then
          lo_s = fmt('%d', lo)
          lo_num[w], lo_text[w] = lo, lo_s
        end
        used = call('ZCOUNT', key, lo_s, '+inf')
      end
      if used > 0 then
        s = args[q + 1]
        local limit = conf[s] or conf_num(s)
        fills = fills or used + 1 >= limit
        if not read_all and ((used + 1) * 8 <= limit or w == nwin and w > 1 and used < limit and limit - used > room) then
          -- At most an eighth full, or the last window with more room
          -- than another: the reply holds 0, and unread what to read.
          unread_n = unread_n + 3
          unread[unread_n - 2], unread[unread_n - 1], unread[unread_n] = n + 2, oldest == nil and key, oldest or used
          oldest = 0
        elseif not oldest then
          local rank = decs[-used] or dec(-used)
          local s = call('ZRANGE', key, rank, rank, 'WITHSCORES')[2]
          oldest = num(s) or sci(s)
        end
        if limit - used < room then
          room = limit - used
        end
        -- The edge and the reply, inline: two calls per window cost
        -- about 4% of a decision over many keys (measured).
        if used >= limit then
          fits = false
          edge = oldest
          if used > limit then
            local rank = dec(-limit)
            local s = call('ZRANGE', key, rank, rank, 'WITHSCORES')[2]
            edge = num(s) or sci(s)
          end
        end
      end
    end
    n = n + 1
    reply[n] = used
    if oldest then
      n = n + 1
      reply[n] = oldest
      if edge then
        n = n + 1
        reply[n] = edge
      end
    end
    longest_used = longest_used or used
    prev_used, prev_oldest = used, oldest
    q = q + 2
  end
  return q, fits, longest_used, longest
end

-- derive_windows derives the nwin windows of a count key whose fields
-- start at args[q] from those the call's previous op on the key left
-- (fields from args[q0], reply from reply[r], added 1 when it added an
-- entry), into the reply, when they have the same periods and none is
-- full (a full window's edge must be read). It returns that op's used in
-- the longest window, or nil (nothing written) when it cannot.
function derive_windows(key, q, nwin, q0, r, added)
  local same = args[q0 - 2] == args[q - 2]
  for w = 0, 2 * nwin - 2, 2 do
    same = same and args[q0 + w] == args[q + w]
  end
  local start, first_used, unread_start = n, reply[r], unread_n
  local room = ${MAX_TOTAL} -- the least room of the windows before the last
  for w = 0, 2 * nwin - 2, 2 do
    if not same then
      break
    end
    local used, oldest = reply[r], nil
    r = r + 1
    if used > 0 then
      oldest = reply[r]
      r = r + 1
      local s = args[q0 + w + 1]
      if used >= (conf[s] or conf_num(s)) then
        r = r + 1 -- the previous op's edge
      end
    end
    if added == 1 then
      used = used + 1
      if not oldest or oldest > t then
        oldest = t -- the window's entries came before the clock went back
      end
    end
    local s = args[q + w + 1]
    local limit = conf[s] or conf_num(s)
    if used >= limit then
      n, same, unread_n = start, false, unread_start
    else
      fills = fills or used + 1 >= limit
      n = n + 1
      reply[n] = used
      if oldest then
        n = n + 1
        if not read_all and ((used + 1) * 8 <= limit or w > 0 and w == 2 * nwin - 2 and limit - used > room) then
          -- As count_windows would reply (see unread); oldest is 0 when
          -- the earlier op did not read it either.
          unread_n = unread_n + 3
          unread[unread_n - 2], unread[unread_n - 1], unread[unread_n] = n, oldest == 0 and key, oldest > 0 and oldest or used
          oldest = 0
        elseif oldest == 0 then
          -- The earlier op did not read it, and this one reports it.
          local rank = decs[-used] or dec(-used)
          local s = call('ZRANGE', key, rank, rank, 'WITHSCORES')[2]
          oldest = num(s) or sci(s)
        end
        reply[n] = oldest
      end
      if limit - used < room then
        room = limit - used
      end
    end
  end
  if same then
    return first_used
  end
  return nil
end

-- add_member adds member to the count and slot keys among KEYS[first+1
-- .. first+nkeys] (see key_state). A member already
-- present (two processes sharing a snowflake node) must not make the
-- request count less than once: the keys added so far are undone and a
-- suffixed member is tried. It returns the suffix and the member added,
-- or nothing when no unique member was found within max_suffix retries.
function add_member(first, nkeys, key_state, member)
  local m, suffix, max_suffix = member, 0, nil
  while true do
    local clash = 0
    for k = 1, nkeys do
      local state = key_state[4 * k]
      if not state then
        if call('ZADD', keys[first + k], 'NX', t_arg, m) == 0 then
          clash = k
          break
        end
      elseif key_state[4 * k - 2] == 0 and call('ZADD', keys[first + k], 'NX', state, m) == 0 then
        clash = k -- a slot key: state is the lease deadline
        break
      end
    end
    if clash == 0 then
      return suffix, m
    end
    for k = 1, clash - 1 do
      if not key_state[4 * k] or key_state[4 * k - 2] == 0 then
        call('ZREM', keys[first + k], m)
      end
    end
    suffix = suffix + 1
    max_suffix = max_suffix or math.abs(num(args[2]))
    if suffix > max_suffix then
      return nil
    end
    m = member .. '.' .. suffix
  end
end

-- bookkeep runs at an admission into key (fields from args[q]; longest:
-- its longest period; busy: whether it is busy; weighted: whether it is
-- weighted) the bookkeeping of its epoch, if this is the epoch's first
-- admission: epochs last the whole longest window for a quiet key, an
-- eighth of it for a busy one, whose stale entries would otherwise cost
-- memory. ZADD CH reports a new epoch (or, after the clock went back, an
-- older one, whose admissions need the deadline renewed all the same).
-- A trim names the key and its retention in key_state_table (trimmed,
-- retention), for the key's copies (see Regions, count_admitted).
function bookkeep(key, q, longest, busy, weighted)
  local epoch_len, epoch_name = longest, args[q + 2]
  if busy then
    epoch_len, epoch_name = ceil(longest / 8), args[q + 1]
  end
  local marker = marks[epoch_name]
  if not marker then
    marker = 'e' .. epoch_name
    if marks_n >= ${CONF_MAX} then
      marks, marks_n = {}, 0
    end
    marks[epoch_name] = marker
    marks_n = marks_n + 1
  end
  local epoch = -(${EPOCH} + floor(t / epoch_len))
  epoch = decs[epoch] or dec(epoch) -- dec, inline: a call per admission
  if call('ZADD', key, 'CH', epoch, marker) ~= 1 then
    return
  end
  -- Entries must outlive the longest window of every group using the key,
  -- not only this one's: the retention is the largest longest window
  -- seen, kept in 'r'.
  local kept = call('ZSCORE', key, 'r')
  local retention = longest
  kept = kept and (num(kept) or sci(kept))
  if kept and -kept >= retention then
    retention = -kept
  else
    call('ZADD', key, dec(-retention), 'r')
    if kept then
      -- A grown retention must reach the deadline of every group's next
      -- admission: drop all epoch markers, so each group's next admission
      -- runs the bookkeeping.
      call('ZREMRANGEBYSCORE', key, '(-${COPY}', '-${EPOCH}')
      call('ZADD', key, epoch, marker)
    end
  end
  -- A key without 'r' is new: it holds only this call's entries, which no
  -- trim removes ('r' leaves only with the key).
  if kept and not weighted then
    call('ZREMRANGEBYSCORE', key, '0', fmt('%d', t - retention))
    key_state_table.trimmed, key_state_table.retention = key, retention
  elseif kept then
    -- A weighted key keeps the newest entry it could trim: its total is
    -- the base of every window's sum.
    local base = call('ZRANGE', key, fmt('%d', t - retention), '0', 'BYSCORE', 'REV', 'LIMIT', '0', '1', 'WITHSCORES')
    if base[2] then
      call('ZREMRANGEBYSCORE', key, '0', '(' .. base[2])
    end
  end
  -- Every admission of this epoch happens before t+I, and its entries
  -- must live for the retention after it. GT: never shorten a deadline
  -- another group's epoch relies on. GT keeps a key without a deadline as
  -- it is: a new key (no 'r' yet) gets a plain PEXPIRE, and one that lost
  -- its deadline (PERSIST, a restore without TTL) gets it back with NX.
  local ttl = fmt('%d', ceil((retention + epoch_len) / 1000) + 1)
  if not kept then
    call('PEXPIRE', key, ttl)
  elseif call('PEXPIRE', key, ttl, 'GT') == 0 then
    call('PEXPIRE', key, ttl, 'NX')
  end
end

-- read_slot reads slot key key (see Slots) as read_distinct reads its key
-- (see mw_op.lua): it has room when fewer than its limit of slots are
-- live.
function read_slot(key, q, at)
  local key_state = key_state_table
  local used = call('ZCOUNT', key, t_arg, '+inf')
  n = n + 1
  reply[n] = used
  local lease = conf_num(args[q + 3])
  key_state[at - 2], key_state[at - 1], key_state[at] = 0, lease, fmt('%d', t + lease)
  return q + 4, used < conf_num(args[q + 2])
end

-- read_block reads block key key (see Blocks) after a key with room or
-- not (key_fits) for an op of member (a peek's is empty): it has room
-- unless a block is in force. key_state[at] true (and no longest period)
-- keeps it out of the admission and the bookkeeping.
function read_block(key, q, at, key_fits, member)
  local key_state = key_state_table
  key_state[at - 2], key_state[at - 1], key_state[at] = -1, false, true
  local left, ends, open = 0, call('GET', key), true
  ends = ends and (num(ends) or sci(ends))
  if ends and ends > t then
    left, open = ends - t, false
  elseif not key_fits and member ~= '' then
    left = conf_num(args[q + 2])
    call('SET', key, fmt('%d', t + left), 'PX', fmt('%d', ceil(left / 1000)))
  end
  n = n + 1
  reply[n] = left
  return q + 3, open
end
