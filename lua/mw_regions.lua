-- mw_regions.lua: the share rule of regions (see Regions in
-- multi_window.lua's header; the proof is in docs/regions.md). A count
-- key holds, beside its entries, a copy of each of this region's
-- admissions that its peers have not all acknowledged: member 'u' and the
-- entry's member, scored -(COPY + t), below every entry and marker, so
-- that no read of the windows (scores from t - P + 1 up) sees it. Copies
-- are trimmed by the key's own bookkeeping and leave with the key; the
-- engine removes one (ZREM) once every peer has its entry.

-- read_unstable reads the copies in count key key, whose 'U' fields start
-- at args[q] and whose count fields start at args[kq], the key having
-- room or not (key_fits): per window of key (period P, limit L) with V
-- entries, of which U have a copy (this region's unacknowledged
-- entries), it has room when U + 1 <= floor((max(L - (V - U), 0) + r) /
-- R), r being this region's index and R the number of regions. It
-- replies left: 0 when every window has room, else the most time until
-- an entry that holds a window back leaves it (at least 1); when every
-- window has room and U was counted, -1 - room instead, room being the
-- least share - U - 1 of those windows (what the share leaves after this
-- admission). It sets key_state ('U') so that an admission adds the
-- member's copy (count_admitted: one ZADD). It also returns whether a
-- window without room is full for the region's share (V > L - R + r: the
-- share is then 0 with U = 0 and a larger U asks for more, so only an
-- entry leaving makes room), which starts the key's block as a full
-- window does (see Blocks).
--
-- What it costs. A key without room needs no check (the op is denied).
-- Otherwise each window's V is in the reply already, as key's last
-- windows: a window with room replies used, then oldest when used > 0,
-- and oldest is a time (above 2^49), used a count (at most 2^30), so
-- they are read from the reply's end. Should the last of several windows
-- reply 0 for an oldest entry it did not read, a count (1 to 2^30) before
-- that 0 tells it from an empty window's used: the window before the last
-- ends with a time or with 0. Since U <= V, a window with
-- V <= floor((L - R + r) / R) has room whatever U is (R * V <= L - R + r
-- gives L - V + U + r >= R * (U + 1)), so U is counted (ZCOUNT) only near
-- the limit. It is the chunk's one function for regions: an EVAL creates
-- every function of the chunk anew (see Cost in multi_window.lua).
function read_unstable(key, q, at, kq, key_fits)
  local r, regions = conf_num(args[q + 2]), conf_num(args[q + 3])
  local nwin = conf_num(args[kq])
  local left, fits, j, room, full = 0, true, n, nil, false
  for w = nwin, 1, -1 do
    if not key_fits then
      break
    end
    local v = reply[j]
    if v > ${COUNT_MAX} or v == 0 and w > 1 and w == nwin and reply[j - 1] > 0 and reply[j - 1] <= ${COUNT_MAX} then
      v, j = reply[j - 1], j - 2
    else
      j = j - 1
    end
    local period, limit = conf_num(args[kq + 2 * w]), conf_num(args[kq + 2 * w + 1])
    if regions * v > limit - regions + r then
      local lo = fmt('%d', t - period + 1)
      local hi = fmt('%d', -(${COPY} + t - period + 1))
      local u = call('ZCOUNT', key, '-inf', hi)
      local head = limit - v + u
      if head < 0 then
        head = 0
      end
      local share = floor((head + r) / regions)
      if not room or share - u - 1 < room then
        room = share - u - 1
      end
      if u + 1 > share then
        -- The oldest copied entry leaving the window, or with none
        -- its oldest entry, makes room at the latest (an
        -- acknowledgement mostly sooner).
        local wait, s = 1, nil
        if u == 0 then
          s = call('ZRANGEBYSCORE', key, lo, '+inf', 'WITHSCORES', 'LIMIT', '0', '1')[2]
          s = s and (num(s) or sci(s))
        else
          s = call('ZRANGE', key, hi, '-inf', 'BYSCORE', 'REV', 'WITHSCORES', 'LIMIT', '0', '1')[2]
          s = s and -(num(s) or sci(s)) - ${COPY}
        end
        if s then
          wait = s + period - t
        end
        if wait > left then
          left = wait
        end
        fits = false
        full = full or v > limit - regions + r
      end
    end
  end
  local key_state = key_state_table
  key_state[at - 3], key_state[at - 2], key_state[at - 1], key_state[at] = kq, -3, false, 'U'
  n = n + 1
  reply[n] = left
  if fits and room then
    reply[n] = -1 - room
  end
  return q + 4, fits, full
end
