-- mw_finish.lua: finish ops (see A finish op in multi_window.lua's
-- header). finish_op runs one step per key of a finish op, named for what
-- it does there, each returning 1 when it changed the key, 0 when not
-- (finish_weight: 2 for a refused change): finish_remove takes out a
-- count key's entry or a slot key's slot (a release: one ZREM),
-- finish_weight changes a weighted entry (mw_weight_change.lua),
-- finish_calendar a calendar counter (mw_calendar.lua) and
-- finish_restore a distinct value (mw_distinct.lua).

-- finish_op runs the finish op whose fields start at args[p], on the KEYS
-- after the first used, into the reply, and returns the index of the next
-- op's first field and the number of KEYS used. Its channel hears of the
-- keys whose windows lost weight.
function finish_op(p, used)
  local member, nkeys = string.sub(args[p], 2), args[p + 1]
  nkeys = conf[nkeys] or conf_num(nkeys)
  local q, channel = p + 2, ''
  if nkeys < 0 then
    nkeys, channel, q = -nkeys, args[p + 2], p + 3
  end
  n = n + 1
  reply[n] = ${ADMITTED}
  local pub
  for k = 1, nkeys do
    local key, kind = keys[used + k], args[q]
    -- A count, slot or weighted key's suffix follows its first letter.
    local suffix = ''
    if #kind > 1 then
      suffix, kind = string.sub(kind, 2), string.sub(kind, 1, 1)
    end
    local changed, removal
    if kind == 'S' or kind == 'C' then
      -- One member, the common case, is removed inline: ZREM then
      -- replies 1 or 0, as finish_remove does.
      if suffix == '' then
        changed = call('ZREM', key, member)
      else
        changed = finish_remove(key, finish_members(member, suffix))
      end
      removal = kind == 'C'
      q = q + 1
    elseif kind == 'A' then
      changed, removal = finish_calendar(key, q, member), num(args[q + 2]) < 0
      q = q + 3
    elseif kind == 'R' then
      changed, removal = finish_restore(key, q), true
      q = q + 4
    else -- a weighted key's mode
      local ms = member
      if suffix ~= '' then
        ms = finish_members(member, suffix)
      end
      changed, removal = finish_weight(key, q, kind, ms), kind == 'r'
      q = q + 4
      if kind == 'g' then
        q = q + 1
      end
    end
    if memo then
      memo[key] = nil -- its windows changed: a later op reads them again
    end
    if changed == 1 and removal then
      pub = pub or {}
      pub[#pub + 1] = key
    end
    n = n + 1
    reply[n] = changed
  end
  if pub and channel ~= '' then
    call('PUBLISH', channel, 'E' .. table.concat(pub, ' '))
  end
  return q, used + nkeys
end

-- finish_members returns member as a key stores it after suffix
-- collisions (suffix: the text after the key's first letter, '' for 0),
-- or when suffix is -1 (unknown) the list of what it may be.
function finish_members(member, suffix)
  if suffix == '' then
    return member
  elseif suffix ~= '-1' then
    return member .. '.' .. suffix
  end
  local ms = {member}
  for s = 1, math.abs(num(args[2])) do
    ms[s + 1] = member .. '.' .. s
  end
  return ms
end

-- finish_remove removes member ms (a list: any of them) from count or
-- slot key key.
function finish_remove(key, ms)
  local gone
  if type(ms) == 'string' then
    gone = call('ZREM', key, ms)
  else
    gone = call('ZREM', key, unpack(ms))
  end
  if gone > 0 then
    return 1
  end
  return 0
end
