-- set_rules.lua: stores or removes one rule override and bumps the
-- overrides' version, in one call, so that a reader never sees one
-- without the other; publishes the new version on the hash's name.
--
-- KEYS[1]  the overrides hash, PREFIX{rules}: scope -> canonical rule text
--          (also the pub/sub channel)
-- KEYS[2]  the version counter, PREFIX{rules}version
-- ARGV[1]  the scope
-- ARGV[2]  the canonical rule text; '' removes the scope's override
--
-- Reply: the new version (integer).
if ARGV[2] == '' then
	redis.call('HDEL', KEYS[1], ARGV[1])
else
	redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
end
local v = redis.call('INCR', KEYS[2])
redis.call('PUBLISH', KEYS[1], v)
return v
