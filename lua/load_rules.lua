-- load_rules.lua: reads the rule overrides and their version together.
--
-- KEYS[1]  the overrides hash, PREFIX{rules}
-- KEYS[2]  the version counter, PREFIX{rules}version
--
-- Reply: {version as a string ('0' when none was ever written),
--         HGETALL of the hash: scope, text, scope, text, ...}.
return {redis.call('GET', KEYS[2]) or '0', redis.call('HGETALL', KEYS[1])}
