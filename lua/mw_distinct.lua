-- mw_distinct.lua: distinct keys (see Distinct in multi_window.lua's
-- header): read_distinct reads an op's windows, finish_restore undoes an
-- admission that counted the value anew.

-- read_distinct reads the windows of distinct key key (see Distinct), a
-- count key whose op counts a value member v, into the reply: the mask of
-- the windows that hold v, then each window as count_windows does. A
-- window that holds v has room whatever its count. Its fields start at
-- args[q] ('0', 'D', v, nwin, busy, then the windows); like the other
-- read_ steps (see mw_op.lua) it returns the index of the next key's fields
-- and whether the key has room. key_state[at] 'D' (v counts again: it is
-- older than the shortest window, or absent) or 'd' (held by every
-- window) keeps the key out of add_member, [at - 3] points at its nwin for
-- the bookkeeping.
function read_distinct(key, q, at)
  local key_state = key_state_table
  local nwin, v = conf_num(args[q + 3]), args[q + 2]
  key_state[at - 3] = q + 3
  q = q + 5
  local s = call('ZSCORE', key, v)
  s = s and (num(s) or sci(s))
  local mask_at = n + 1
  n = n + 2
  -- what a rollback restores (see Distinct): 0 nothing, 1 absent, or the
  -- old score
  reply[n] = 0
  if not s then
    reply[n] = 1
  elseif s <= t - conf_num(args[q + 2 * nwin - 2]) then
    reply[n] = s
  end
  local mask, bit = 0, 1
  local fits, longest_used = true, nil
  for w = 0, nwin - 1 do
    local lo = t - conf_num(args[q + 2 * w]) + 1
    local limit = conf_num(args[q + 2 * w + 1])
    local held = s and s >= lo
    if held then
      mask = mask + bit
    end
    bit = bit * 2
    -- The memo of lo_num and lo_text, as in count_windows.
    local lo_s = lo_text[w + 1]
    if lo_num[w + 1] ~= lo then
      lo_s = fmt('%d', lo)
      lo_num[w + 1], lo_text[w + 1] = lo, lo_s
    end
    local used, oldest, edge = call('ZCOUNT', key, lo_s, '+inf'), nil, nil
    if used > 0 then
      local rank = dec(-used)
      local score = call('ZRANGE', key, rank, rank, 'WITHSCORES')[2]
      oldest = num(score) or sci(score)
      -- The edge, as in count_windows: the entry at rank used-limit from
      -- the oldest must leave first.
      if used == limit then
        edge = oldest
      elseif used > limit then
        local rank = dec(-limit)
        local s = call('ZRANGE', key, rank, rank, 'WITHSCORES')[2]
        edge = num(s) or sci(s)
      end
      fits = fits and (held or not edge)
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
  end
  reply[mask_at] = mask
  local shortest = conf_num(args[q + 2 * nwin - 2])
  key_state[at - 2], key_state[at - 1] = conf_num(args[q]), longest_used >= ${BUSY}
  key_state[at] = (s and s > t - shortest) and 'd' or 'D'
  return q + 2 * nwin, fits
end

-- finish_restore restores a distinct value (fields 'R', value, at, prev
-- from args[q]; see Distinct): only if its score is still at, which
-- takes a read, as no Redis command removes or rescores a member on a
-- condition of its score.
function finish_restore(key, q)
  local s = call('ZSCORE', key, args[q + 1])
  if not s or (num(s) or sci(s)) ~= num(args[q + 2]) then
    return 0
  end
  if args[q + 3] == '1' then
    call('ZREM', key, args[q + 1])
  else
    call('ZADD', key, args[q + 3], args[q + 1])
  end
  return 1
end
