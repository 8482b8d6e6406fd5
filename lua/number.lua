-- number.lua: precedes every script that reads numbers back from Redis
-- (lua.go joins them), so that each reads them the same way.
--
-- sci reads a number that Redis printed in exponent form. Real Redis
-- prints scores with %.17g (plain digits for every integer below 2^53),
-- but miniredis prints the shortest form, as 2e+15 or -3e+08, and the
-- tonumber of gopher-lua (miniredis's Lua) returns nil for an exponent
-- without a decimal point. The scripts read every number that comes back
-- from Redis as tonumber(s) or sci(s): one call, as before, on real
-- Redis. The digits are shifted as text, so an integer reads exactly.
local function sci(s)
  local sign, int, frac, exp = string.match(s, '^(-?)(%d*)%.?(%d*)[eE]%+?(-?%d+)$')
  if not sign then
    return nil
  end
  local digits, shift = int .. frac, tonumber(exp) - #frac
  local v
  if shift >= 0 then
    v = tonumber(digits .. string.rep('0', shift))
  else
    v = tonumber(digits) / 10 ^ -shift
  end
  if v and sign == '-' then
    v = -v
  end
  return v
end
