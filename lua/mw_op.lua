-- mw_op.lua: an allow or peek op (see Design in multi_window.lua's
-- header). decide_op reads the op's keys (read_keys), admits it when
-- every key has room (add_member, admit_weighted), counts what follows the
-- admission (count_admitted) and updates the memo (remember_op). The
-- special keys are read by steps of their own, each named read_ and the
-- key's kind (read_slot and read_block in mw_count.lua, read_distinct,
-- read_calendar): each reads the key at at (see key_state), whose fields
-- start at args[q], into the reply and key_state, and returns the index
-- of the next key's fields and whether the key has room.

-- decide_op decides the allow or peek op whose fields start at args[p],
-- on the KEYS after the first used_keys, into the reply. It returns the
-- index of the next op's first field and the number of KEYS used, or nil
-- and an error reply.
function decide_op(p, used_keys)
  if t == 0 then
    -- TIME's seconds and microseconds (unpadded) joined as text: one
    -- number to parse, and none to format for t_arg (see Cost).
    local now = call('TIME')
    t_arg = now[1] .. (USEC_PAD[#now[2]] or string.sub('00000', #now[2])) .. now[2]
    t = num(t_arg)
    reply[2] = t % ${SECOND}
    reply[1] = (t - reply[2]) / ${SECOND}
  end
  local member, nkeys = args[p], args[p + 1]
  nkeys = conf[nkeys] or conf_num(nkeys)
  local remember = nkeys < 0
  if remember then
    nkeys = -nkeys
    if not memo then
      memo, key_memo = {}, {}
    end
  end
  n = n + 1
  local code = n
  unread_n, fills = 0, false
  local q, fits, weighted = read_keys(p + 2, used_keys, nkeys, member, remember)
  if not q then
    return nil, nil, fits
  end
  -- A denial, or an admission that fills a window, reports every
  -- window's oldest entry (see unread).
  for i = 3, fits and not fills and 0 or unread_n, 3 do
    local s = unread[i]
    if unread[i - 1] then
      local rank = decs[-s] or dec(-s)
      s = call('ZRANGE', unread[i - 1], rank, rank, 'WITHSCORES')[2]
      s = num(s) or sci(s)
    end
    reply[unread[i - 2]] = s
  end
  local status, suffix = ${DENIED}, 0
  if fits then
    status = ${ADMITTED}
  end
  if fits and member ~= '' then
    local m
    suffix, m = add_member(used_keys, nkeys, key_state_table, member)
    if not suffix then
      status, suffix = ${COLLISION}, 0
    else
      -- Weighted members hold their running total, so they are unique:
      -- they are added once the member's suffix is known.
      for k = 1, weighted and nkeys or 0 do
        local state = key_state_table[4 * k]
        if type(state) == 'table' then
          local err = admit_weighted(keys[used_keys + k], state, m)
          if err then
            return nil, nil, err
          end
        end
      end
      count_admitted(used_keys, nkeys, remember, key_memo, m)
    end
  end
  reply[code] = status + 4 * suffix
  if memo then
    -- An op the engine did not mark may share a key all the same: every op
    -- of a call with a memo updates it, unmarked ones by forgetting.
    local added = 0
    if status == ${ADMITTED} and member ~= '' then
      added = 1
    end
    remember_op(used_keys, nkeys, remember, key_memo, added)
  end
  return q, used_keys + nkeys
end

-- read_keys reads the nkeys keys of an op of member (a peek's is empty),
-- the KEYS after the first used_keys, whose fields start at args[q],
-- into the reply and key_state; remember: the engine marked the op (see
-- memo). It returns the index of the next op's first field, whether every
-- key has room and whether one is weighted, or nil and an error reply.
function read_keys(q, used_keys, nkeys, member, remember)
  local key_state = key_state_table
  local fits, weighted = true, false
  local key_fits = true -- whether the previous key had room (see Blocks)
  for k = 1, nkeys do
    local key, nwin, at = keys[used_keys + k], args[q], 4 * k
    nwin = conf[nwin] or conf_num(nwin)
    key_state[at - 3] = q
    if remember then
      key_memo[2 * k - 1], key_memo[2 * k] = n + 1, false
    end
    if nwin > 0 then
      local m = remember and memo[key]
      local longest_used, longest, added_at
      if m then
        -- See memo.
        local added = m % 2
        m = (m - added) / 2
        local r = m % ${SLOTS}
        q, key_fits, longest_used, longest, added_at = count_windows(key, q + 2, nwin, (m - r) / ${SLOTS}, r, added)
      else
        q, key_fits, longest_used, longest = count_windows(key, q + 2, nwin)
      end
      local busy = longest_used >= ${BUSY}
      key_state[at - 2], key_state[at - 1], key_state[at] = longest, busy, false
      if added_at then
        -- The op that added an entry ran the bookkeeping of the key's epoch
        -- marker at t; if this op's marker is the same, there is none left.
        key_memo[2 * k] = (added_at >= ${BUSY}) == busy
      end
    elseif nwin < 0 then
      local state
      q, key_fits, state = weigh(key, q + 2, -nwin)
      weighted, key_state[at - 2], key_state[at - 1], key_state[at] = true, conf_num(args[state[4]]), true, state
    else
      local kind = args[q + 1]
      if kind == 'S' then
        -- A slot key has no block key: key_fits stays the previous key's.
        local slot_fits
        q, slot_fits = read_slot(key, q, at)
        fits = fits and slot_fits
      elseif kind == 'D' then
        q, key_fits = read_distinct(key, q, at)
      elseif kind == 'P' or kind == 'Q' or kind == 'q' then
        q, key_fits = read_calendar(key, q, at, fits and member ~= '')
        if not q then
          return nil, redis.error_reply(key_fits)
        end
      elseif kind == 'B' then
        -- key_fits stays the blocked key's.
        local open
        q, open = read_block(key, q, at, key_fits, member)
        fits = fits and open
      elseif kind == 'U' then
        -- key_fits stays the count key's, before it (see Regions), unless
        -- a window is full for the region's share: its block then starts.
        local share_fits, share_full
        q, share_fits, share_full = read_unstable(key, q, at, key_state[at - 7], key_fits)
        fits = fits and share_fits
        key_fits = key_fits and not share_full
      else
        return nil, redis.error_reply('ERR slidelimit: unknown key kind ' .. kind)
      end
    end
    fits = fits and key_fits
  end
  return q, fits, weighted
end

-- count_admitted counts an admitted op in the nkeys keys after KEYS[first]
-- beyond its member (added by add_member and admit_weighted): a distinct
-- value, a calendar count, and each key's bookkeeping, unless the op's
-- memo entries (key_memo, in ops the engine marked: remember) say it ran
-- at t already. m is the member added.
function count_admitted(first, nkeys, remember, key_memo, m)
  local key_state = key_state_table
  for k = 1, nkeys do
    local at = 4 * k
    if key_state[at] == 'U' then
      -- The count key's copy of the member (see Regions): below every
      -- entry and marker; trimmed with the key's entries when bookkeep
      -- just trimmed them (it names the key and its retention).
      local key = keys[first + k]
      call('ZADD', key, fmt('%d', -(${COPY} + t)), 'u' .. m)
      if key_state.trimmed == key then
        call('ZREMRANGEBYSCORE', key, '(' .. fmt('%d', -(${COPY} + t - key_state.retention)), '-${COPY}')
        key_state.trimmed = nil
      end
    elseif key_state[at] == 'D' or key_state[at] == 'd' then
      -- A distinct key: the value counts (again) at t.
      local key = keys[first + k]
      if key_state[at] == 'D' then
        call('ZADD', key, t_arg, args[key_state[at - 3] - 1])
      end
      bookkeep(key, key_state[at - 3], key_state[at - 2], key_state[at - 1], false)
    elseif key_state[at - 2] == -2 then
      -- A calendar key: the period's new count, written at the end
      -- of the call (see cal_memo).
      local m, cost = cal_memo[keys[first + k]], key_state[at - 1]
      m[2], m[3] = m[2] + cost, m[3] - cost
      m[4] = m[4] or key_state[at - 3]
    elseif key_state[at - 2] == 0 then
      -- A slot key: its bookkeeping once per epoch of one lease (see
      -- Slots).
      local key, lease = keys[first + k], key_state[at - 1]
      local epoch = -(${EPOCH} + floor(t / lease))
      if call('ZADD', key, 'CH', decs[epoch] or dec(epoch), 'e') == 1 then
        call('ZREMRANGEBYSCORE', key, '0', '(' .. t_arg)
        local ttl = fmt('%d', ceil(2 * lease / 1000) + 1)
        if call('PEXPIRE', key, ttl, 'GT') == 0 then
          call('PEXPIRE', key, ttl, 'NX')
        end
      end
    elseif key_state[at] ~= true and not (remember and key_memo[2 * k]) then
      bookkeep(keys[first + k], key_state[at - 3], key_state[at - 2], key_state[at - 1], key_state[at])
    end
  end
end

-- remember_op updates the memo (see memo) after an op on the nkeys keys
-- after KEYS[first]: the op's count keys, when the engine marked it
-- (remember; key_memo: see memo), with added 1 when it added an entry;
-- any other key is forgotten.
function remember_op(first, nkeys, remember, key_memo, added)
  local key_state = key_state_table
  for k = 1, nkeys do
    local at = 4 * k
    local m
    if remember and not key_state[at] and key_memo[2 * k - 1] < ${SLOTS} then
      m = ((key_state[at - 3] + 2) * ${SLOTS} + key_memo[2 * k - 1]) * 2 + added
    end
    if key_state[at] ~= 'U' then -- the count key's copies: its memo stays
      memo[keys[first + k]] = m
    end
  end
end
