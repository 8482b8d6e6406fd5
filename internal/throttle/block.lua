-- block.lua: the learned blocks of one throttle (block.go),
-- so that Limiter.Reset finds the lanes a subject's block holds and the
-- operator page lists them. A lane's block itself is its own key (KEYS[3]
-- of turn.lua), in the lane's hash slot; this sorted set, in the
-- throttle's slot, only names it.
--
-- KEYS[1]  blocks: sorted set; member a lane id, then for each of the
--          lane's subjects "\n", its limiter ID, " " and its fingerprint;
--          score the block's end (ms, server TIME). Ended members are
--          dropped by every call; the key expires with its last member.
-- ARGV[1]  op: 'a' add (or replace) member ARGV[2] for ARGV[3] ms;
--          'l' lift: remove every member that has the line ARGV[2]
--          ("limiter fingerprint") and return their lane ids;
--          's' show: return now (ms) then each member and its end
--
-- Reply: 'a' {}; 'l' the lane ids; 's' {now, member, end, member, end, ...}
--
-- After 'l', the Go code deletes the lanes' block keys and publishes
-- "u|LIMITER FINGERPRINT" on the throttle's channel (turn.lua's
-- ARGV[5]): every process ends its hold on its lanes with that subject.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
local op = ARGV[1]
if op == 'a' then
  redis.call('ZADD', KEYS[1], now + tonumber(ARGV[3]), ARGV[2])
  local last = redis.call('ZRANGE', KEYS[1], -1, -1, 'WITHSCORES')
  redis.call('PEXPIREAT', KEYS[1], string.format('%d', tonumber(last[2])))
  return {}
end
if op == 'l' then
  local out = {}
  local line = '\n' .. ARGV[2]
  for _, m in ipairs(redis.call('ZRANGE', KEYS[1], 0, -1)) do
    local s = m .. '\n'
    if string.find(s, line .. '\n', 1, true) then
      redis.call('ZREM', KEYS[1], m)
      out[#out + 1] = string.sub(m, 1, (string.find(m, '\n', 1, true) or (#m + 1)) - 1)
    end
  end
  return out
end
local out = {tostring(now)}
local all = redis.call('ZRANGE', KEYS[1], 0, -1, 'WITHSCORES')
for i = 1, #all do out[#out + 1] = all[i] end
return out
