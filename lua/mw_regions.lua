-- mw_regions.lua: the share rule of regions (see Regions in
-- multi_window.lua's header; the proof is in docs/regions.md). An
-- unstable key holds this region's admissions in a count key that its
-- peers have not all acknowledged: the same members, scored the same,
-- kept by the same bookkeeping (epochs, retention, expiry), and removed by
-- the engine once every peer has the entry.

-- read_unstable reads unstable key key, whose fields start at args[q],
-- for count key ckey, the key just before it, whose fields start at
-- args[kq]: per window of ckey (period P, limit L) it counts U, this
-- region's unacknowledged entries, and V, every entry, and has room when
-- U + 1 <= floor((max(L - (V - U), 0) + r) / R), r being this region's
-- index and R the number of regions. It replies left: 0 when every window
-- has room, else the most time until an entry that holds a window back
-- leaves it (at least 1). It sets key_state so that an admission adds
-- the member here as in a count key, with ckey's bookkeeping.
function read_unstable(key, q, at, ckey, kq)
  local r, regions = conf_num(args[q + 2]), conf_num(args[q + 3])
  local left, fits, longest_used = 0, true, 0
  for w = 1, conf_num(args[kq]) do
    local period, limit = conf_num(args[kq + 2 * w]), conf_num(args[kq + 2 * w + 1])
    local lo = fmt('%d', t - period + 1)
    local u = call('ZCOUNT', key, lo, '+inf')
    if w == 1 then
      longest_used = u
    end
    local head = limit - call('ZCOUNT', ckey, lo, '+inf') + u
    if head < 0 then
      head = 0
    end
    if u + 1 > floor((head + r) / regions) then
      -- The oldest unstable entry leaving (or, with none, the oldest
      -- entry) makes room at the latest.
      local from = key
      if u == 0 then
        from = ckey
      end
      local s = call('ZRANGEBYSCORE', from, lo, '+inf', 'WITHSCORES', 'LIMIT', '0', '1')[2]
      local wait = 1
      if s then
        wait = (num(s) or sci(s)) + period - t
      end
      if wait > left then
        left = wait
      end
      fits = false
    end
  end
  local key_state = key_state_table
  key_state[at - 3], key_state[at - 2] = kq, conf_num(args[kq + 2])
  key_state[at - 1], key_state[at] = longest_used >= ${BUSY}, false
  n = n + 1
  reply[n] = left
  return q + 4, fits
end
