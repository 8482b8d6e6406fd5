-- renew.lua: extends the leases of running requests' slots (see Slots in
-- the header of multi_window.lua, which specifies slot keys). It reads
-- scores as num(s) or sci(s) (lua/number.lua precedes it).
--
-- Arguments (decimal strings, times in microseconds since 1970):
--   ARGV[1]  t: the time, or 0 to use the server's TIME
--   ARGV[2]  lease: each renewed slot is scored t + lease
--   then per key of KEYS, in order: the number of members m, then m
--   members (each a running request's member in that key).
-- Reply: an array of integers, per member in argument order: 1 when its
-- slot was there and is renewed, 0 when it is gone (a Reset, a flush, an
-- expired lease). A renewed key's expiry is
-- extended to the lease (PEXPIRE GT, or NX for a key without one).
--
-- A member whose lease ran out (scored below t) is not renewed: admissions
-- since may have counted without it (expired slots are removed once per
-- epoch only), so reviving it could make more than the limit run at once.
-- It is removed and reported gone.
local call = redis.call
local num = tonumber
local fmt = string.format
local t = num(ARGV[1])
if t == 0 then
  local now = call('TIME')
  t = num(now[1]) * 1000000 + num(now[2])
end
local lease = num(ARGV[2])
local score = fmt('%d', t + lease)
local ttl = fmt('%d', math.ceil(lease / 1000) + 1)
local reply = {}
local i = 3
for k = 1, #KEYS do
  local key = KEYS[k]
  local renewed = false
  for _ = 1, num(ARGV[i]) do
    i = i + 1
    local m = ARGV[i]
    local s = call('ZSCORE', key, m)
    if s and (num(s) or sci(s)) >= t then
      call('ZADD', key, 'XX', score, m)
      reply[#reply + 1] = 1
      renewed = true
    else
      if s then
        call('ZREM', key, m)
      end
      reply[#reply + 1] = 0
    end
  end
  i = i + 1
  if renewed and call('PEXPIRE', key, ttl, 'GT') == 0 then
    call('PEXPIRE', key, ttl, 'NX')
  end
end
return reply
