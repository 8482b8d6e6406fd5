-- multi_window.lua: exact multi-window sliding logs in sorted sets.
--
-- This header is the specification of the script's wire format, the only
-- one: engine/script.go builds its arguments and reads its reply. The engine
-- package documentation (engine/doc.go) states the semantics this script
-- implements; the design notes after the stored state say how.
--
-- Arguments. Every argument is a string; a number is a decimal integer
-- written without sign (unless negative), leading zeros or exponent.
-- Times and periods are in microseconds since 1970.
--   ARGV[1]  t: the decision time, or 0 to use the server's TIME (read
--            at the first op that is not a finish op). t must
--            exceed every period and stay below 2^53.
--   ARGV[2]  max_suffix: how many suffixed members an admission tries
--            after collisions (the engine's maxSuffix, which is the one
--            definition of that limit).
--   then one or more ops, up to the end of ARGV, each:
--     member  the request's id, unique per request; empty for a peek
--             (check only, nothing is written). An allow checks every
--             window and admits in every key or in none.
--     nkeys   the op uses the next |nkeys| KEYS (after the previous ops');
--             negative marks an op that shares a key with another op of
--             the call, so that the later one derives that key's windows
--             instead of reading them (see memo). The mark changes no
--             result: an unmarked op is read in full.
--     then per key, either a count key:
--       nwin, busy, then nwin times: period, limit
--     or a weighted key (a limiter with a cost or a grain):
--       -nwin, busy, cost, then nwin times: period, limit, grain
--     or a special key, whose first field is 0 and second a one-letter
--     kind:
--       0, 'S', limit, lease     a slot key (in-flight window, see Slots)
--       0, 'B', block            the block key of the key just before it
--                                (see Blocks below); block is its length.
--       0, 'P', cost, limit, b1, b2, b3, b4
--                                a calendar key (see Calendars below):
--                                b1 < b2 < b3 < b4 bound three
--                                consecutive calendar periods.
--       0, 'Q', cost, limit, i   a calendar key whose boundaries are
--                                ARGV[i .. i+3], those of an earlier
--                                'P' key of the call (the ops of a batch
--                                mostly count in the same periods).
--       0, 'q'                   a calendar key with the fields of the
--                                call's previous calendar key, which was
--                                the same key (a batch on a hot subject).
--       0, 'D', value, nwin, busy, then nwin times: period, limit
--                                a count key whose op counts the member
--                                value instead of the op's (see
--                                Distinct).
--     Windows come longest first. busy is ceil(longest period / 8), the
--     epoch length of a busy key (see bookkeep), which also names its
--     epoch marker. grain is the tier's merge grain (0: exact). lease is
--     how long an admitted request holds its slot unless renewed (µs).
--   A finish op (Engine.Finish, and the removals of rollbacks and undos)
--   ends an admitted request in the keys it names; its member starts
--   with '-':
--     '-'..member, nkeys, [channel,] then per key, either
--       'C'              a count key: remove the member
--       'S'              a slot key: remove the member (release)
--       mode, delta, at, cost [, grain]
--                        a weighted key: change the request's cost, cost,
--                        by delta in mode 'r', 's' or 'g', which alone
--                        sends grain (see Weighted changes below)
--       'A', start, delta
--                        a calendar key: add delta to the count of the
--                        period starting at start, once per member (see
--                        Calendars)
--       'R', value, at, prev
--                        a distinct key: restore value (see Distinct)
--     The first field of a count, slot or weighted key ('C', 'S' or the
--     mode) is followed, in the same field, by the member's suffix in the
--     key unless it is 0 ('S2'), or -1 when unknown ('C-1': every suffix
--     0..max_suffix is removed). channel, sent when nkeys is negative (the
--     op then uses -nkeys KEYS), receives one PUBLISH of 'E' and the count
--     and weighted keys the op removed an entry from, space-separated (the
--     engine's cache invalidation). Every field costs Redis about 1,000
--     instructions before the script runs (a string object, a Lua string,
--     a table slot; a finish op rides an admission's call), so a finish op
--     sends no field that holds its usual value: the release and
--     settlement of a download are 7 fields.
--   EVAL's numkeys is the sum of the ops' |nkeys|. Example: allow request
--   77 in one key with windows of 1 min (limit 50) and 1 s (limit 5),
--   at the server's time:
--     EVALSHA sha 1 key 0 32 77 1 2 7500000 60000000 50 1000000 5
--   or, with the script loaded as a Redis Function (lua/lua.go,
--   MultiWindowLibrary; same KEYS, ARGV and reply):
--     FCALL slidelimit_<sha> 1 key 0 32 77 1 2 7500000 60000000 50 1000000 5
--
-- Reply: an array of integers (a Lua table of numbers):
--   sec, usec  the decision time (t, or the server's TIME; 0, 0 for a
--              call of finish ops alone at t 0, which reads no time)
--   then per op: code, then per key and window, in argument order:
--     used [oldest [edge]]
--   except for a slot key, which replies its live slots before the op:
--     used
--   a calendar key, what its period held before the op and the time to
--   the period's end:
--     used left
--   and a distinct key, before its windows, the mask of the windows that
--   held its value before the op (bit w-1 for window w) and what undoing
--   the op restores (0: nothing, the value does not count anew; 1: the
--   value was absent; else its old score):
--     held prev used [oldest [edge]] ...
-- code is status + 4*suffix. status is 1 when the op admitted (a peek:
-- would admit), 0 when a window had no room, and 2 when no unique member
-- was found within max_suffix retries (nothing written, suffix 0). suffix
-- counts the collisions retried: the stored member is then member, '.',
-- suffix. A window (t - period, t] is read as scores [t-period+1, +inf):
-- entries scored after t (admitted before the server's clock went back)
-- count. used is the window's number of entries before the op (a weighted
-- key: their summed cost); oldest, present when used > 0, is the score of
-- the window's oldest entry; edge, present when the request does not fit
-- (count key: used >= limit; weighted key: used + cost > limit), is the
-- score of the entry that must leave the window for it to fit (count key:
-- the entry at rank used-limit, 0-based, from the window's oldest;
-- weighted key: the window's oldest entry whose running total reaches
-- the newest total + cost - limit).
--
-- A finish op's code is 1, followed per key by 1 when an entry was
-- removed or changed, 0 when none was (already gone, already settled; a
-- counter of another period, or already adjusted for the member; a value
-- counted again since), 2 when a
-- weighted change was refused because a total would exceed 2^53. Its
-- channel receives the count, weighted, calendar (when delta < 0) and
-- distinct keys it changed.
--
-- Weighted changes. mode is 'r' for a removal (delta = -cost), 's' for a
-- settlement (Engine.Settle: delta is the actual cost minus the charged
-- one), 'g' for a settlement in a key with grained windows, where grain
-- is the key's coarsest grain (not sent in the other modes). at is the
-- request's decision time (mode 'g' needs it; 0 when unknown, as in
-- rollbacks and undos): the change then reads only the entries from at
-- on and the one before, not the whole key, unless the entry is not among
-- them; the one before only when delta <= -cost. An entry's weight never
-- falls below the cost its request was charged (admissions charge it
-- exactly, merges and debts only add), so a delta above -cost leaves it a
-- weight and changes it by exactly delta, and the entry before (whose
-- total is the base of the weight) is needed only to tell whether a
-- weight falls to zero. The entry's total and the totals of every later
-- entry change by the delta, which changes exactly the request's weight in
-- every window it is in, at its own admission time. A negative delta
-- lowers the entry's weight by at most that weight: never below zero,
-- never a credit. An entry left without weight is deleted. An entry that
-- keeps a weight is renamed, so that a second removal or settlement finds
-- nothing: '-' after a removal (it stands for merged requests), the member
-- and '!' after a settlement (a settled request is neither settled again
-- nor given back). With more than 64 later entries, rewriting them all is
-- too costly: a removal then only deletes the entry (its weight counts
-- with the next entry, which leaves the windows later), a refund is not
-- made, and a debt is added to the newest entry; each errs on the side of
-- denying. A request whose entry is not found changes nothing, except in
-- mode 'g': its entry may have been merged into the next one, which then
-- carries its cost: the first entry scored at or after at, if it lies in
-- the same grain, is settled instead (not renamed: it stands for other
-- requests too), else a debt goes to the newest entry. A change reads the
-- whole key (O(entries)); this path is rare.
--
-- What a finish costs. A release or a count key's removal is one ZREM, a
-- calendar change its record (HSETNX, so that a retried op runs once),
-- one HINCRBY (which also reads what the period held) and the records'
-- period (HSET; an HDEL instead when the period is over), a
-- distinct restore a ZSCORE and a write (no command changes a member on a
-- condition of its score). A weighted change is not one write: a
-- window's sum is two lookups because each entry's member holds its
-- running total, so changing a request's cost changes its member, and
-- Redis renames a member only by removing it and adding the new one (the
-- total cannot move to the score, which is the entry's time). Keeping the
-- old member and adding the change beside it fails exactness: a refund's
-- entry would hold a lower total than the entry before it, and the edge
-- search, the window's oldest entry and the merges would read the stale
-- total (an early Retry-After). So a change of the key's newest entry, the
-- common case (a request finished soon after its admission), is ZPOPMAX,
-- which reads and removes it in one call, and ZADD of its new member; a
-- give-back, or a refund of the whole cost, also reads the entry before
-- (ZRANGE of the last rank), which its weight is based on. When the
-- newest entry is another request's, a settlement reads the entries from
-- at on (one ZRANGE) and renames the request's entry, each later one and
-- the popped one, which is already removed: as many calls as a read
-- first would cost. A give-back (or a refund of the whole cost, or a
-- settlement in mode 'g') then puts the popped entry back as it was
-- (ZADD) and reads as before: two calls more.
--
-- A block key's reply is one integer, left: the time until its block
-- ends (0: not blocked).
--
-- Blocks. A block key holds the time its block ends (t + block, %d) and
-- expires with it (PX, block rounded up to ms; the value, not the expiry,
-- says whether a block is in force, so a test clock works too). An op
-- whose block key holds an end after t is blocked: it is denied (status
-- 0) whatever its windows say, adds nothing anywhere and leaves the block
-- as it is, so attempts during a block never extend it (left is the time
-- to its end). Otherwise, when the key just before had no room in a
-- window, an allow (not a peek) sets the block key to t + block (left =
-- block): the first denial starts the block. A slot key has no block
-- key: an in-flight window's denial starts no block (a slot frees as soon
-- as a running request ends; a block punishes going over a rate).
--
-- Distinct. A distinct key is a count key (same entries, markers and
-- bookkeeping) whose op counts a value, such as a URL path, instead of
-- the request: the engine sends the value's member ('v:' and the value,
-- escaped or hashed like subjects, so it never equals an id or a marker),
-- and the op adds no member of its own there. The value's entry is scored
-- by the time it last counted. A window holds the value when that score
-- lies inside it, and then has room whatever its count (the value counts
-- once there); a window that does not hold it needs used < limit, as for
-- any request. An admitted op re-scores the value to t (ZADD, so it
-- counts again) only when it is absent or older than the shortest
-- window: a value requested again inside the shortest window counts
-- nowhere anew. Each window thus holds the values whose last count lies
-- inside it. edge is sent when used >= limit, as in count keys, even if
-- the value fits. A finish op's 'R' key (a restore) undoes an admission that counted the value
-- anew at time at (a rollback of a request that another key denied): if
-- the value's score is still at, it is removed (prev 1) or given back its
-- old score prev; otherwise a later request counted it again and it
-- stays.
--
-- Calendars. A calendar key (engine: the limiter's key followed by
-- ':cal:' and the unit, same hash tag; engine/calendar.go) counts a
-- calendar window (a day, an ISO week or a month in a time zone) in a
-- hash: the field START, the start of the period it counts, in µs,
-- written as in ARGV, holding COUNT (%d), what was admitted in it, and
-- the records of the period's finish ops (below). The
-- engine computes period boundaries in the zone (wall-clock midnights, so
-- a DST day lasts 23 or 25 hours) around its own clock and sends four,
-- bounding three periods: the op counts in the period [b_i, b_(i+1)) that
-- holds t, whatever clock t comes from (TIME or the engine's test clock),
-- and fails with 'ERR slidelimit: time outside the calendar boundaries of
-- <key>' when none does (a clock more than a period away from the
-- engine's). A period without a field counts 0. The key has room when
-- used + cost <= limit; a denial's wait is left, the time to the period's
-- end, where the window is empty. An allow that fits in the keys before
-- adds its cost at once (HINCRBY, which also reads used: one call), and
-- takes it back at the end of the call when the op is not admitted (a
-- period left at 0 loses its field, an empty hash is gone: a denial
-- leaves nothing); a peek, or an allow already denied, reads the field
-- (HGET). After the period's first admission (used 0) the key's expiry
-- is set (PEXPIRE) to left rounded up to ms plus CAL_MARGIN: relative to
-- t, so it never ends before the period does, and a test clock works too
-- (a field of another period counts 0 whatever the expiry); the fields
-- of other periods are then deleted (HLEN, and when the key holds more
-- than START, HGET of 'm' and HKEYS unless 'm' is START: the records of
-- this period stay); later admissions keep the expiry.
-- The ops of one call on a key count on from each other and what they
-- add after the first is written once, at the end of the call (see
-- cal_memo). Memory is one small hash per subject and period, whatever
-- the limit, plus a record per finish op in the period. A finish op's 'A'
-- key (a give-back, a settlement, a rollback) adds delta (negative: a
-- refund) to the count of the period starting at start with one HINCRBY,
-- never below 0 (at 0 the field is deleted), keeping the expiry; a period
-- without a field (HINCRBY returns delta) is left without one, and
-- without a record: the period the request counted in is over. A count
-- keeps no member to remove, so the op records itself: it runs only if
-- HSETNX of the field '-' .. member (value 1) sets it, and then sets the
-- field 'm' to START, the period of the records. A second op of the
-- member in the key changes nothing (reply 0): the engine retries an op
-- whose call timed out though Redis may have run it, and a request has at
-- most one 'A' op per key (a give-back, a settlement or a rollback).
-- Members sharing an id (two processes with one snowflake node) share the
-- record, and the later op is lost (a refund errs on the side of denying,
-- a debt goes uncharged). The records go with the key's expiry, or at the
-- next period's first admission. A key of the earlier format, a string
-- START ':' COUNT, becomes the hash of that count and expiry the first time
-- an op touches it (its HSETNX, HGET or HINCRBY fails with WRONGTYPE).
--
-- Errors: 'ERR slidelimit: running total above 2^53 in <key>' when a
-- weighted key's running total would lose exactness; 'ERR slidelimit:
-- unknown key kind <kind>' for a special key of another kind.
--
-- Slots. A slot key (engine: the limiter's key followed by ':slots', same
-- hash tag) holds one member per running request, the request's member
-- (as in the other keys of the op, suffix included), scored by its lease
-- deadline t + lease. Live slots are those scored >= t: an op fits only if
-- fewer than limit are live (ZCOUNT; a denial or a peek writes nothing).
-- An admission adds the member scored t + lease with ZADD NX (a clash is
-- a collision, as in count keys). Like a count key's, the rest of the
-- bookkeeping runs once per epoch, of one lease: ZADD CH of the marker
-- 'e' scored -(EPOCH + floor(t / lease)) reports the epoch's first
-- admission, which removes the expired members (scores below t) and sets
-- the key's expiry to two leases (PEXPIRE GT, or NX for a key without
-- one): every slot added in the epoch ends before its start + two leases,
-- so the key never dies under a live slot. Expired members left until the
-- next epoch are never counted (ZCOUNT from t), and lua/renew.lua renews
-- only live slots, so a slot whose lease ran out never comes back: at
-- most limit run at once, and a dead process's slots free one lease after
-- their last renewal. A release is a finish op's 'S' key.
--
-- Stored state. A count key's entry is the member scored t. A weighted
-- key's entry is its running total of cost (%016d), ':' and the member,
-- scored t (or its newest entry's score, if later). Markers have negative
-- scores, which no window counts and no trim removes: 'r' scored
-- -retention, and per epoch length I a member 'e'..I scored -(EPOCH +
-- floor(t / I)) (I written as in ARGV: the longest period or busy).
--
-- Denial tallies (internal/tally; not this script's, listed here so that
-- every key under the prefix has one spec). prefix{tally}:10s:<n> and
-- prefix{tally}:1m:<n> (n = Unix time / 10 s or / 1 min; one hash tag, so
-- one cluster slot) are sorted sets: member = escaped scope '|' escaped
-- limiter ID '|' escaped subject (the subject as the keys store it:
-- hashed there, hashed here), score = denials counted in the bucket. Each
-- process writes once a period (ZINCRBY per entry, ZREMRANGEBYRANK to the
-- 256 highest, PEXPIRE 5 min 20 s or 62 min) in one pipeline.
--
-- Design. An op counts every window of every key first (ZCOUNT of
-- [t-period+1, +inf), or derived from the longer window: none when it
-- holds none, all when its oldest entry is inside the shorter one); if a
-- window has no room it writes nothing at all, not even a trim; otherwise
-- it adds the member with ZADD NX to every key (a member already present,
-- from two processes sharing a snowflake node, would count the request
-- less than once, so the keys added so far are undone and a suffixed
-- member is tried), then keeps each key's bookkeeping.
--
-- Retention. Keys can be shared by groups whose longest windows differ
-- (handlers sharing a scope). Trimming by one group's longest window would
-- delete entries another group's longer window still needs, and the TTL
-- says when the key dies, not how far back its windows reach. So a key
-- remembers its retention in 'r', rewritten only when it grows: the largest
-- longest window any group admitted with while the key lived.
--
-- Epochs. The bookkeeping (ZSCORE of 'r', the trim, PEXPIRE) would cost
-- three of an admission's six or so calls, so it runs once per epoch: of
-- length I = the longest period, or busy (an eighth of it) once the key
-- holds BUSY entries in its longest window, so that stale entries stay
-- below an eighth of a busy key's window. ZADD CH of the epoch marker
-- reports the epoch's first admission (or an earlier epoch's, after the
-- clock went back), which trims and sets the expiry to retention + I with
-- PEXPIRE GT: every admission of the epoch comes before its start + I, so
-- the key outlives each entry's retention, and GT never shortens a
-- deadline another group's epoch relies on. When the retention grows all
-- epoch markers are dropped, so every group's next admission sets a
-- deadline with the new retention. A key without 'r' is new (its first
-- admission): it holds nothing to trim, so only its expiry is set.
--
-- Weighted keys. A window's sum is the newest total minus the total of the
-- last entry before the window: two lookups for any number of entries,
-- and a denial finds the entry whose departure makes room by a binary
-- search over ranks. Merging an entry into the next one is deleting it:
-- the next entry's total includes its cost, and it leaves the windows
-- later. Tier j holds the entries older than every window shorter than
-- W_j but inside W_j; an entry there is deleted when the next entry lies in
-- the same grain of tier j, the tier's grain being the finest of the
-- windows an entry in it is still in (0, exact, when one of them is), and
-- the engine rounds each tier's grain down to a multiple of the next
-- shorter one's so that grains nest (engine/plan.go, nestGrains). The trim
-- keeps the newest entry it could remove, whose total is the base of every
-- window. A finish op removes or settles a request in a weighted key (see
-- Weighted changes).
--
-- Cost: each redis.call costs about 1 µs of Redis CPU beyond the command
-- itself, and turning a number into a string or back about 0.2 µs, which
-- is most of what a decision costs (callgrind on redis-server 7.0: glibc's
-- strtod and printf take 1,000-2,000 instructions per number, a decision
-- about 100,000). Hence: numbers are parsed only when needed and formatted
-- with %d (redis.call formats a number argument with %.17g, which costs
-- more than a ZCOUNT), shorter windows are derived from longer ones where
-- possible, entries are read by rank, which needs no score bounds parsed
-- (reading a key's few entries whole in one call was measured and is no
-- cheaper: converting a reply element costs about half a redis.call), and
-- the per-key bookkeeping (retention, trim, expiry) runs once per epoch
-- instead of once per admission. Every window's oldest entry is read,
-- though a caller's headers need only one window's: reading only that one
-- (and counting every window with ZCOUNT) was measured and saved 1-5% for
-- keys whose entries spread beyond the shortest window but cost 24-28%
-- more for keys whose entries all lie in it (bursts, denials), where the
-- longer window's oldest entry gives the shorter window's count. A batch
-- of decisions on one key (a hot key under load) reads the key once: the
-- later ops derive their counts from the earlier op's (see memo), which
-- leaves one ZADD per decision and halves the call's instructions for 16
-- decisions on a key. An EVAL runs this whole chunk, so the local
-- functions below are closures created anew every call (about 3.5 µs of
-- a decision's 5-6 on Redis 7.0, measured with INFO commandstats), and
-- each upvalue they capture costs: the ones only weighted keys need are
-- created at the first weighted key, the memo's work is inline, in the
-- ops the engine marked, constants are literals, and the locals are
-- declared in the order that makes binding upvalues cheapest (see
-- Declarations). The engine therefore loads the script as a
-- Redis Function where it can (lua/lua.go, MultiWindowLibrary): the
-- chunk then runs once, at FUNCTION LOAD, and each FCALL runs only run,
-- which resets the call's state (see run). The library also keeps pure
-- memos from call to call (conf, decs, marks, lo_text): the numbers of
-- configuration fields and the %d texts that recur, which spare about
-- half of a decision's Lua work on tonumber and string.format.

-- Declarations. Every local of the chunk is declared here, functions
-- too (each defined below by assignment), in an order that matters to the
-- EVAL form, which runs the whole chunk each call: Lua 5.1 binds each
-- upvalue of each closure it creates by walking the chunk's captured
-- locals from the top of the stack down to it, so a local declared early
-- and captured often costs a walk past every captured local declared
-- after it, each time. The locals are therefore declared by how many
-- closures capture them, fewest first, then those only run captures (run
-- comes last and opens them as it binds them): counted from the
-- bytecode, these walks take 2,100 steps per EVAL in this order, 1,760
-- before run's steps were split out (read_slot ... remember_op), 3,500
-- in the file order.
-- FCALL binds nothing per call, and reads an upvalue the same wherever it
-- was declared.
local run
local ARITH_DEC, conf_n, decs_n, marks_n, weight_functions, cal_migrate, finish_members, finish_remove
local change_newest, settle_entry, finish_weight, finish_calendar, finish_restore, marks, bookkeep
local calendar_period, cal_read, decs, lo_num, lo_text, weigh, admit_weighted, change_weight
local span_end, span_start, span_stop, flush_cal_key, flush_cal, byte, cal_call
local cal_fields, memo, t_arg, cal_memo, ceil, keys, floor, conf, dec
-- Numbers read back from Redis (scores, stored values) are read as
-- num(s) or sci(s): see lua/number.lua, which precedes this script and
-- declares sci first (at the bottom of the stack); sci is declared again
-- here, for the walks above.
local sci = sci
-- call, fmt, num, floor, ceil and byte are Redis's and Lua's functions,
-- which run sets: a Redis Function's library is loaded where only
-- redis.register_function and redis.log exist (no string, math or
-- redis.call), so nothing at the top level may call anything.
local key_state_table, reply, n, t, conf_num, fmt, args, num, call
local USEC_PAD, reply_table, count_windows, weighted_functions, add_member, finish_op
local read_slot, read_distinct, read_calendar, read_block, count_admitted, remember_op

-- Constants are literals, named in comments where they are used: a local
-- would be one more upvalue for each EVAL to bind (see the declarations
-- above). EPOCH, 2^51 = 2251799813685248, offsets epoch markers below
-- every -retention. BUSY, 64 entries in a key's longest window, make it
-- busy: its epochs, and so its trims, come 8 times per window instead of
-- once. TOTAL, 2^53 - 1 = 9007199254740991, bounds a weighted key's
-- running total, which then stays exact in a double. An op's status in
-- the reply is DENIED 0, ADMITTED 1 or COLLISION 2.

-- USEC_PAD[#usec] is string.sub('00000', #usec), the zeros that pad
-- TIME's microseconds (1 to 6 digits) to six: a lookup, not a call.
USEC_PAD = {'00000', '0000', '000', '00', '0', ''}

-- ARITH_DEC tells whether arithmetic reads a string as a decimal number,
-- as Lua 5.1 does with one strtod where tonumber runs two (lua_isnumber,
-- then lua_tonumber): a finish reads a total and a delta that way. The
-- Lua of miniredis (gopher-lua) reads a leading 0 as octal there, so a
-- total (zero-padded) is read with num where ARITH_DEC is false; a field
-- sent without leading zeros reads the same in both.
ARITH_DEC = ('010' + 0) == 10

-- The call's state, which the functions below share: run sets every one
-- of these at the start of each call, as a Function's library outlives
-- its calls (see run). keys and args are the call's KEYS and ARGV; reply
-- is the reply, n the last index written in it; t is the decision time
-- and t_arg t as a score argument.
-- The tables run fills each call: the reply, made with room for one op on
-- a key with two windows (growing a table costs about 1,000 instructions
-- per step), and key_state (see run). A Function's library keeps them
-- from call to call, which spares it making two tables each time: run
-- writes every field it reads first, and Redis ends an array reply at
-- its first nil, which run sets after the last field, so what a longer
-- earlier call left beyond it is never read. (An EVAL runs the whole
-- chunk, so its tables are new each call.)
reply_table, key_state_table = {0, 0, 0, 0, 0, 0, 0, 0}, {0, 0, 0, 0}

-- memo maps a count key to where the call's last op on it left its
-- windows, for ops the engine marks as sharing a key with another op of
-- the call (see nkeys): (q * SLOTS + r) * 2 + a, with SLOTS 131072, q
-- the index of the key's first period in args, r the reply index of its
-- first window's used, and a 1 when that op added an entry. Nothing else
-- writes the key within the call, so a later op with the same periods
-- derives its windows from that op's instead of reading them again.

-- conf maps a configuration field (nkeys, nwin, a period, limit, cost,
-- grain, lease, block or suffix: never a member, time or score) to its
-- num, read as conf[s] or conf_num(s): an interned string's lookup costs
-- a tenth of a tonumber, and a decision reads six or more such fields. A
-- pure memo (it holds exactly num(s)), so a Function's library keeps it
-- from call to call (an EVAL starts it empty); cleared at CONF_MAX =
-- 1024 entries, as limits may differ per request.
conf, conf_n = {}, 0

-- conf_num returns num(s), remembered in conf.
function conf_num(s)
  local v = conf[s]
  if v then
    return v
  end
  v = num(s)
  if v then
    if conf_n >= 1024 then -- CONF_MAX
      conf, conf_n = {}, 0
    end
    conf[s] = v
    conf_n = conf_n + 1
  end
  return v
end

-- decs maps a number to fmt('%d', it), for the numbers that recur from
-- call to call: ranks (small integers) and epoch markers' scores (one per
-- epoch length and epoch). A format costs about 0.2 µs, a lookup a
-- twentieth of that. A pure memo like conf, cleared at CONF_MAX entries.
decs, decs_n = {}, 0

-- dec returns fmt('%d', x), remembered in decs.
function dec(x)
  local s = decs[x]
  if s then
    return s
  end
  s = fmt('%d', x)
  if x == x then -- NaN is no table key
    if decs_n >= 1024 then -- CONF_MAX
      decs, decs_n = {}, 0
    end
    decs[x] = s
    decs_n = decs_n + 1
  end
  return s
end

-- marks maps an epoch length's text to its marker, 'e' and the text: a
-- concatenation costs a new string's hashing, a lookup does not. A pure
-- memo like conf, cleared at CONF_MAX entries (by bookkeep, its one
-- reader: a function of its own would be one more closure per EVAL).
marks, marks_n = {}, 0

-- lo_num[w] and lo_text[w] are the last lower bound (t - period + 1) a
-- key's window w was read from and fmt('%d', it): the ops of a call share
-- t, and mostly their periods, so a batch formats each bound once. A
-- pure memo too (the text is checked against the number); a bound is new
-- each call, so a table of them would only grow.
lo_num, lo_text = {}, {}

-- count_windows reads the nwin windows of count key key, whose fields
-- start at args[q] (the first period), into the reply, or derives them
-- from the windows the call's previous op on the key left (q0, r, added:
-- its memo entry, see memo) when they have the same periods and none is
-- full (a full window's edge must be read). It returns the index of the
-- next field, whether every window has room, the entries in the longest
-- window and its period, and, when it derived them from an op that added
-- an entry, that op's entries in the longest window. A window's entries
-- are the last used ranks of the key, so its oldest entry and edge are
-- read by rank.
function count_windows(key, q, nwin, q0, r, added)
  if q0 then
    local same = args[q0 - 2] == args[q - 2]
    for w = 0, 2 * nwin - 2, 2 do
      same = same and args[q0 + w] == args[q + w]
    end
    local start, first_used = n, reply[r]
    for w = 0, 2 * nwin - 2, 2 do
      if not same then
        break
      end
      local used, oldest = reply[r], nil
      r = r + 1
      if used > 0 then
        oldest = reply[r]
        r = r + 1
        local s = args[q0 + w + 1]
        if used >= (conf[s] or conf_num(s)) then
          r = r + 1 -- the previous op's edge
        end
      end
      if added == 1 then
        used = used + 1
        if not oldest or oldest > t then
          oldest = t -- the window's entries came before the clock went back
        end
      end
      local s = args[q + w + 1]
      if used >= (conf[s] or conf_num(s)) then
        n, same = start, false
      else
        n = n + 1
        reply[n] = used
        if oldest then
          n = n + 1
          reply[n] = oldest
        end
      end
    end
    if same then
      if added == 1 then
        return q + 2 * nwin, true, first_used + 1, conf_num(args[q]), first_used
      end
      return q + 2 * nwin, true, first_used, conf_num(args[q])
    end
  end
  local fits = true
  local longest_used, longest
  local prev_used, prev_oldest = -1, nil
  for w = 1, nwin do
    local used, oldest, edge = 0, nil, nil
    -- A window inside a longer one without entries has none either.
    if prev_used ~= 0 then
      local s = args[q]
      local period = conf[s] or conf_num(s)
      longest = longest or period
      local lo = t - period + 1
      if prev_oldest and prev_oldest >= lo then
        -- The longer window's oldest entry is inside this one, so all of
        -- its entries are.
        used, oldest = prev_used, prev_oldest
      else
        -- window_lo and dec, inline.
        local lo_s = lo_text[w]
        if lo_num[w] ~= lo then
          lo_s = fmt('%d', lo)
          lo_num[w], lo_text[w] = lo, lo_s
        end
        used = call('ZCOUNT', key, lo_s, '+inf')
        if used > 0 then
          local rank = decs[-used] or dec(-used)
          local s = call('ZRANGE', key, rank, rank, 'WITHSCORES')[2]
          oldest = num(s) or sci(s)
        end
      end
      if used > 0 then
        -- count_edge and put_window, inline: two calls per window cost
        -- about 4% of a decision over many keys (measured).
        local s = args[q + 1]
        local limit = conf[s] or conf_num(s)
        if used >= limit then
          fits = false
          edge = oldest
          if used > limit then
            local rank = dec(-limit)
            local s = call('ZRANGE', key, rank, rank, 'WITHSCORES')[2]
            edge = num(s) or sci(s)
          end
        end
      end
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
    prev_used, prev_oldest = used, oldest
    q = q + 2
  end
  return q, fits, longest_used, longest
end

-- Weighted keys (keys of limiters with a cost or a grain) are read and
-- written by weigh and admit_weighted, which weighted_functions creates at
-- the first weighted key of an EVAL (of a Function: the first since the
-- library was loaded; they keep no state between calls).
function weighted_functions()
  -- MERGE_SCAN bounds the entries an admission looks at per tier.
  local MERGE_SCAN = '257'
  -- MINUS starts a negative score: a marker's.
  local MINUS = string.byte('-')
  local byte = string.byte

  -- window_lo returns fmt('%d', lo) for window w, through lo_text.
  local function window_lo(w, lo)
    if lo_num[w] == lo then
      return lo_text[w]
    end
    local s = fmt('%d', lo)
    lo_num[w], lo_text[w] = lo, s
    return s
  end

  -- put_window appends a window's used, oldest and edge to the reply (see
  -- Reply: oldest only when used > 0, edge only when the request does not
  -- fit).
  local function put_window(used, oldest, edge)
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
  end

  -- total returns the running total of weighted member m.
  local function total(m)
    return num(string.sub(m, 1, 16))
  end

  -- weigh reads the nwin windows of weighted key key, whose cost is at
  -- args[q] and windows after it, into the reply like count_windows. It
  -- returns the index of the next field, whether every window has room,
  -- and the key's state for admit_weighted: newest total, newest score
  -- (nil when the key is empty), cost, the index of its first window and
  -- the number of windows.
  weigh = function(key, q, nwin)
    local cost = conf_num(args[q])
    q = q + 1
    local first = q
    local fits = true
    local newest_total, newest_score = 0, nil
    -- Entries have scores >= 0 and markers negative ones, so the key's
    -- last rank is its newest entry unless it holds only markers.
    local top = call('ZRANGE', key, '-1', '-1', 'WITHSCORES')
    if top[1] and byte(top[2]) ~= MINUS then
      newest_total, newest_score = total(top[1]), num(top[2]) or sci(top[2])
    end
    for w = 1, nwin do
      local used, oldest, edge = 0, nil, nil
      if newest_total > 0 then
        -- The window's sum is the newest total minus the total of the
        -- last entry before the window (0 when there is none): entries
        -- after t (the clock went back) count, as in count keys. That
        -- entry and the window's oldest are neighbours in rank, read in
        -- one call.
        local lo = window_lo(w, t - conf_num(args[q]) + 1)
        local first_rank = call('ZCOUNT', key, '-inf', '(' .. lo)
        local before, first_member, first_score
        if first_rank > 0 then
          local pair = call('ZRANGE', key, dec(first_rank - 1), dec(first_rank), 'WITHSCORES')
          if byte(pair[2]) ~= MINUS then
            before = pair[1]
          end
          first_member, first_score = pair[3], pair[4]
        else
          local first = call('ZRANGE', key, '0', '0', 'WITHSCORES')
          first_member, first_score = first[1], first[2]
        end
        used = newest_total
        if before then
          used = newest_total - total(before)
        end
        if used > 0 then
          oldest = num(first_score) or sci(first_score)
          local limit = conf_num(args[q + 1])
          if used + cost > limit then
            fits = false
            -- The request fits once the entries up to the first whose
            -- total reaches need have left the window: a binary search
            -- over ranks between the window's oldest entry and the newest.
            local need = newest_total + cost - limit
            local edge_score = top[2]
            local lo_rank, hi_rank = 0, 0
            if total(first_member) >= need then
              edge_score = first_score
            else
              lo_rank, hi_rank = first_rank + 1, call('ZCARD', key) - 1
            end
            while lo_rank < hi_rank do
              local mid = floor((lo_rank + hi_rank) / 2)
              local rank = dec(mid)
              local entry = call('ZRANGE', key, rank, rank, 'WITHSCORES')
              if total(entry[1]) >= need then
                hi_rank, edge_score = mid, entry[2]
              else
                lo_rank = mid + 1
              end
            end
            edge = num(edge_score) or sci(edge_score)
          end
        end
      end
      put_window(used, oldest, edge)
      q = q + 3
    end
    return q, fits, {newest_total, newest_score, cost, first, nwin}
  end

  -- admit_weighted adds member m to weighted key key (state: from weigh),
  -- then merges entries (see Weighted keys in the header): in each tier j (entries older
  -- than the windows shorter than W_j, still inside W_j), an entry whose
  -- successor lies in the same grain of tier j is deleted, so that the
  -- successor (later, and carrying the larger total) stands for both. Only
  -- the entries that reached a tier since the previous admission (and
  -- their neighbours in the same grain) are looked at, at most MERGE_SCAN
  -- per tier. It returns an error reply, or nil.
  admit_weighted = function(key, state, m)
    local newest_total, newest_score, cost, first, nwin = state[1], state[2], state[3], state[4], state[5]
    if newest_total + cost > 9007199254740991 then -- TOTAL
      return redis.error_reply('ERR slidelimit: running total above 2^53 in ' .. key)
    end
    local score = t
    if newest_score and newest_score > t then
      score = newest_score -- scores never decrease along totals; the entry leaves later
    end
    call('ZADD', key, fmt('%d', score), fmt('%016d', newest_total + cost) .. ':' .. m)
    if not newest_score then
      return nil
    end
    local shorter = 0 -- the next shorter window's period: tier j starts there
    for w = nwin, 1, -1 do
      local q = first + 3 * (w - 1)
      local period, grain = conf_num(args[q]), conf_num(args[q + 2])
      if grain > 0 then
        local hi = '+inf'
        if shorter > 0 then
          hi = fmt('%d', t - shorter)
        end
        local lo = t - period + 1
        if newest_score - shorter - grain > lo then
          lo = newest_score - shorter - grain
        end
        local entries = call('ZRANGE', key, hi, fmt('%d', lo), 'BYSCORE', 'REV', 'LIMIT', '0', MERGE_SCAN, 'WITHSCORES')
        local merged = {}
        for i = 3, #entries, 2 do
          local a, b = entries[i + 1], entries[i - 1]
          if floor((num(a) or sci(a)) / grain) == floor((num(b) or sci(b)) / grain) then
            merged[#merged + 1] = entries[i]
          end
        end
        if #merged > 0 then
          call('ZREM', key, unpack(merged))
        end
      end
      shorter = period
    end
    return nil
  end
end

-- add_member adds member to the count and slot keys among KEYS[first+1
-- .. first+nkeys] (see key_state). A member already
-- present (two processes sharing a snowflake node) must not make the
-- request count less than once: the keys added so far are undone and a
-- suffixed member is tried. It returns the suffix and the member added,
-- or nothing when no unique member was found within max_suffix retries.
function add_member(first, nkeys, key_state, member)
  local m, suffix, max_suffix = member, 0, nil
  while true do
    local clash = 0
    for k = 1, nkeys do
      local state = key_state[4 * k]
      if not state then
        if call('ZADD', keys[first + k], 'NX', t_arg, m) == 0 then
          clash = k
          break
        end
      elseif key_state[4 * k - 2] == 0 and call('ZADD', keys[first + k], 'NX', state, m) == 0 then
        clash = k -- a slot key: state is the lease deadline
        break
      end
    end
    if clash == 0 then
      return suffix, m
    end
    for k = 1, clash - 1 do
      if not key_state[4 * k] or key_state[4 * k - 2] == 0 then
        call('ZREM', keys[first + k], m)
      end
    end
    suffix = suffix + 1
    max_suffix = max_suffix or num(args[2])
    if suffix > max_suffix then
      return nil
    end
    m = member .. '.' .. suffix
  end
end

-- bookkeep runs at an admission into key (fields from args[q]; longest:
-- its longest period; busy: whether it is busy; weighted: whether it is
-- weighted) the bookkeeping of its epoch, if this is the epoch's first
-- admission: epochs last the whole longest window for a quiet key, an
-- eighth of it for a busy one, whose stale entries would otherwise cost
-- memory. ZADD CH reports a new epoch (or, after the clock went back, an
-- older one, whose admissions need the deadline renewed all the same).
function bookkeep(key, q, longest, busy, weighted)
  local epoch_len, epoch_name = longest, args[q + 2]
  if busy then
    epoch_len, epoch_name = ceil(longest / 8), args[q + 1]
  end
  local marker = marks[epoch_name]
  if not marker then
    marker = 'e' .. epoch_name
    if marks_n >= 1024 then -- CONF_MAX
      marks, marks_n = {}, 0
    end
    marks[epoch_name] = marker
    marks_n = marks_n + 1
  end
  local epoch = dec(-(2251799813685248 + floor(t / epoch_len))) -- EPOCH
  if call('ZADD', key, 'CH', epoch, marker) ~= 1 then
    return
  end
  -- Entries must outlive the longest window of every group using the key,
  -- not only this one's: the retention is the largest longest window
  -- seen, kept in 'r'.
  local kept = call('ZSCORE', key, 'r')
  local retention = longest
  kept = kept and (num(kept) or sci(kept))
  if kept and -kept >= retention then
    retention = -kept
  else
    call('ZADD', key, dec(-retention), 'r')
    if kept then
      -- A grown retention must reach the deadline of every group's next
      -- admission: drop all epoch markers, so each group's next admission
      -- runs the bookkeeping.
      call('ZREMRANGEBYSCORE', key, '-inf', '-2251799813685248') -- -EPOCH
      call('ZADD', key, epoch, marker)
    end
  end
  -- A key without 'r' is new: it holds only this call's entries, which no
  -- trim removes ('r' leaves only with the key).
  if kept and not weighted then
    call('ZREMRANGEBYSCORE', key, '0', fmt('%d', t - retention))
  elseif kept then
    -- A weighted key keeps the newest entry it could trim: its total is
    -- the base of every window's sum.
    local base = call('ZRANGE', key, fmt('%d', t - retention), '0', 'BYSCORE', 'REV', 'LIMIT', '0', '1', 'WITHSCORES')
    if base[2] then
      call('ZREMRANGEBYSCORE', key, '0', '(' .. base[2])
    end
  end
  -- Every admission of this epoch happens before t+I, and its entries
  -- must live for the retention after it. GT: never shorten a deadline
  -- another group's epoch relies on. GT keeps a key without a deadline as
  -- it is: a new key (no 'r' yet) gets a plain PEXPIRE, and one that lost
  -- its deadline (PERSIST, a restore without TTL) gets it back with NX.
  local ttl = fmt('%d', ceil((retention + epoch_len) / 1000) + 1)
  if not kept then
    call('PEXPIRE', key, ttl)
  elseif call('PEXPIRE', key, ttl, 'GT') == 0 then
    call('PEXPIRE', key, ttl, 'NX')
  end
end

-- read_distinct reads the windows of distinct key key (see Distinct), a
-- count key whose op counts a value member v, into the reply: the mask of
-- the windows that hold v, then each window as count_windows does. A
-- window that holds v has room whatever its count. Its fields start at
-- args[q] ('0', 'D', v, nwin, busy, then the windows); like the other
-- read_ steps (see below) it returns the index of the next key's fields
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
    -- window_lo and put_window (see weighted_functions), inline: a closure
    -- costs each EVAL.
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
  key_state[at - 2], key_state[at - 1] = conf_num(args[q]), longest_used >= 64 -- BUSY
  key_state[at] = (s and s > t - shortest) and 'd' or 'D'
  return q + 2 * nwin, fits
end

-- WEIGHT_MOVE, 64, bounds the later entries a weighted change rewrites.
-- WEIGHT_READ, '132' (2 * WEIGHT_MOVE + 4, as an argument), bounds the
-- entries a change reads from its decision time on: found among them with
-- more than WEIGHT_MOVE after it, a request is changed as with more than
-- WEIGHT_MOVE (see change in weight_functions).

-- Finish ops (see Finish steps below) change weighted keys with
-- change_weight when change_newest and settle_entry cannot, which
-- weight_functions creates then: it is the rare path, and a closure costs
-- every EVAL.
function weight_functions()
  local MOVE, READ = 64, '132' -- WEIGHT_MOVE, WEIGHT_READ

  local function total(m)
    return num(string.sub(m, 1, 16))
  end
  local function name(v, rest)
    return fmt('%016d', v) .. rest
  end

  -- The state of the change being made (see change_weight), in upvalues
  -- of the functions below (made once per EVAL, or once per library: see
  -- run), each set by change_weight before it is read: kk,
  -- delta and mode as given; the request's member want1 and its settled
  -- name settled1, or sets want and settled of its possible members (an
  -- unknown suffix); es: the key's entries (member, score, ...) from
  -- first on, or only those from the entry before at on (see READ); cut:
  -- more follow; no_before: es starts at at, without the entry before
  -- (delta > -cost: see Weighted changes).
  local kk, delta, mode, want1, settled1, want, settled, es, first, cut, no_before

  -- newest returns the key's newest entry and its score.
  local function newest()
    if not cut then
      return es[#es - 1], es[#es]
    end
    local top = call('ZRANGE', kk, '-1', '-1', 'WITHSCORES')
    return top[1], top[2]
  end
  -- charge_newest adds a debt to the key's newest entry.
  local function charge_newest()
    local m, score = newest()
    if total(m) + delta > 9007199254740991 then -- TOTAL
      return 2
    end
    call('ZREM', kk, m)
    call('ZADD', kk, score, name(total(m) + delta, string.sub(m, 17)))
    return 1
  end
  -- change changes the weight of the entry at index i of es by delta,
  -- renaming it with tag (nil: keep its name). es holds every later
  -- entry, or more than MOVE of them (cut).
  local function change(i, tag)
    local m = es[i]
    local prev = 0
    if i > 1 then
      prev = total(es[i - 2])
    end
    local xt = total(m)
    -- c: the change of the request's weight, never below minus that weight.
    local c = math.max(delta, prev - xt)
    if i == 1 and no_before then
      -- The weight is at least cost, and delta > -cost.
      prev, c = -1, delta
    end
    tag = tag or string.sub(m, 17)
    if (#es - i - 1) / 2 > MOVE then
      if mode == 'r' then
        call('ZREM', kk, m)
        return 1
      end
      if c > 0 and charge_newest() == 2 then
        return 2
      end
      call('ZREM', kk, m)
      call('ZADD', kk, es[i + 1], name(xt, tag))
      return 1
    end
    if c > 0 and total(es[#es - 1]) + c > 9007199254740991 then -- TOTAL
      return 2
    end
    call('ZREM', kk, m)
    if xt + c > prev then
      call('ZADD', kk, es[i + 1], name(xt + c, tag))
    end
    for j = i + 2, #es, 2 do
      local mj = es[j]
      call('ZREM', kk, mj)
      call('ZADD', kk, es[j + 1], name(total(mj) + c, string.sub(mj, 17)))
    end
    return 1
  end
  -- find changes the request's entry if es holds it and returns what
  -- change returns, 0 when it was settled already, nil when es does not
  -- say (not there, or cut too close to it).
  local function find()
    for i = first, #es, 2 do
      local rest = string.sub(es[i], 18)
      if rest == settled1 or settled and settled[rest] then
        return 0
      end
      if rest == want1 or want and want[rest] then
        if cut and (#es - i - 1) / 2 <= MOVE then
          return nil
        end
        if mode == 'r' then
          return change(i, ':-')
        end
        return change(i, ':' .. rest .. '!')
      end
    end
    return nil
  end
  -- change_weight changes the request whose member is ms (or among ms, a
  -- list) in weighted key key by d, in mode md: 'r' (a removal), 's' (a
  -- settlement) or 'g' (a settlement in a key with grained windows, at
  -- the decision time at in the coarsest grain grain), whose request was
  -- charged cost. It returns 1 when an entry changed, 0 when none did, 2
  -- when a debt would take a total above 2^53 (nothing changed).
  local function change_of(key, d, md, at, grain, ms, cost)
    kk, delta, mode = key, d, md
    if type(ms) == 'string' then
      want1, settled1, want, settled = ms, ms .. '!', nil, nil
    else
      want1, settled1, want, settled = nil, nil, {}, {}
      for _, m in ipairs(ms) do
        want[m] = true
        settled[m .. '!'] = true
      end
    end
    if at > 0 then
      -- The request's entry is scored at its decision time at, or later:
      -- read only the entries from at on, and the one before (its total
      -- is the base of the request's weight), not the whole key, which
      -- holds every request of the longest window (a hot subject's
      -- thousands). At most READ entries: more than MOVE after the
      -- request's are not rewritten anyway. Not found there (on a cluster
      -- whose node clocks differ it may be scored a little earlier), the
      -- whole key is read, as without at.
      local a = fmt('%d', at)
      es = call('ZRANGE', kk, a, '+inf', 'BYSCORE', 'LIMIT', '0', READ, 'WITHSCORES')
      cut = #es == 2 * num(READ)
      first, no_before = 1, delta > -cost and mode ~= 'g'
      if not no_before then
        local before = call('ZRANGE', kk, '(' .. a, '0', 'BYSCORE', 'REV', 'LIMIT', '0', '1', 'WITHSCORES')
        if before[1] then
          table.insert(es, 1, before[2])
          table.insert(es, 1, before[1])
          first = 3
        end
      end
      local r = find()
      if r then
        return r
      end
    end
    es, first, cut, no_before = call('ZRANGE', kk, '0', '+inf', 'BYSCORE', 'WITHSCORES'), 1, false, false
    local r = find()
    if r then
      return r
    end
    if mode == 'g' then
      for i = 1, #es, 2 do
        local score = num(es[i + 1]) or sci(es[i + 1])
        if score >= at then
          if floor(score / grain) == floor(at / grain) then
            return change(i, nil)
          end
          break
        end
      end
      if delta > 0 and #es > 0 then
        return charge_newest()
      end
    end
    return 0
  end
  change_weight = function(key, d, md, at, grain, ms, cost)
    local r = change_of(key, d, md, at, grain, ms, cost)
    -- A Function's library keeps these upvalues between calls: drop the
    -- entries read, which may be a whole key's.
    es, want, settled = nil, nil, nil
    return r
  end
end

-- CAL_BOUNDS, 4, is the number of period boundaries of a calendar key;
-- CAL_MARGIN, 1000 ms, keeps its counter alive that long past its period.

-- span_end, span_start and span_stop: the end of the engine's current
-- period among the last calendar key's boundaries that held t (b3,
-- args[q + 2] in calendar_period), its start (b2, args[q + 1]) and its
-- end as a number: the ops of a call mostly send the same boundaries,
-- which are then parsed once.

-- calendar_period returns the start (as its argument) and the end of the
-- period that holds t among the boundaries at args[q ..], or nothing.
function calendar_period(q)
  if span_end == args[q + 2] and span_start == args[q + 1] then
    return span_start, span_stop
  end
  -- The current period first: [b2, b3).
  local lo, hi = num(args[q + 1]), num(args[q + 2])
  if t >= lo and t < hi then
    span_end, span_start, span_stop = args[q + 2], args[q + 1], hi
    return span_start, hi
  end
  for j = q, q + 2, 2 do -- CAL_BOUNDS - 2
    lo, hi = num(args[j]), num(args[j + 1])
    if t >= lo and t < hi then
      return args[j], hi
    end
  end
end

-- cal_migrate turns calendar key key of the earlier format, a string
-- 'START:COUNT' (slidelimit before the hash), into a hash of one field
-- with the same count and expiry: an upgrade keeps the period's count.
function cal_migrate(key)
  local v, ttl = call('GET', key), call('PTTL', key)
  call('DEL', key)
  local colon = v and string.find(v, ':', 1, true)
  if colon then
    call('HSET', key, string.sub(v, 1, colon - 1), string.sub(v, colon + 1))
    if ttl > 0 then
      call('PEXPIRE', key, ttl)
    end
  end
end

-- cal_call runs cmd (HGET, or HINCRBY by incr) on field f of calendar key
-- key, which it first migrates when it is of the earlier format (the
-- command fails with WRONGTYPE); any other error is raised as it is.
function cal_call(cmd, key, f, incr)
  local r
  if incr then
    r = redis.pcall(cmd, key, f, incr)
  else
    r = redis.pcall(cmd, key, f)
  end
  if type(r) == 'table' and r.err then
    if not string.find(r.err, 'WRONGTYPE', 1, true) then
      error(r)
    end
    cal_migrate(key)
    if incr then
      return call(cmd, key, f, incr)
    end
    return call(cmd, key, f)
  end
  return r
end

-- cal_memo maps a calendar key that an op of the call read to {start,
-- count, ahead, ttl}: its period's start (as in ARGV), the period's count
-- after the call's admissions so far, what Redis holds beyond count (a
-- tentative increment not admitted, to be taken back; negative: admissions
-- not written yet), and, when one of the call's admissions was the
-- period's first, the expiry to set (else false). Later ops on the key
-- read the count there;
-- flush_cal writes what is pending once, at the end of the call (or
-- before an error reply, or before a finish op adjusts the key): a batch
-- of decisions on a hot subject costs one HINCRBY and one flush, not one
-- of each per decision.

-- cal_fields maps a calendar key to the fields the call's last op on it
-- sent: {start, stop, cost, limit} as numbers (start as in ARGV), then
-- cost, limit and the fourth field as sent. An op sending the same
-- fields, or 'q', reuses them instead of parsing them again (the ops of a
-- batch on a hot subject).

-- flush_cal_key writes memo entry m of calendar key k: what Redis lacks
-- or holds beyond the count (a period left at 0 is deleted), and after a
-- period's first admission the key's expiry, dropping the counts of other
-- periods.
function flush_cal_key(k, m)
  local start, pending = m[1], -m[3]
  if pending ~= 0 then
    if m[2] == 0 then
      call('HDEL', k, start)
    else
      call('HINCRBY', k, start, fmt('%d', pending))
    end
  end
  if m[4] and m[2] > 0 then
    call('PEXPIRE', k, m[4])
    -- Other fields are other periods' counts, or the records of finish
    -- ops ('m' names their period): those of this period stay (the count
    -- fell to 0 and rose again), a retry of their op must find them.
    if call('HLEN', k) > 1 and call('HGET', k, 'm') ~= start then
      for _, f in ipairs(call('HKEYS', k)) do
        if f ~= start then
          call('HDEL', k, f)
        end
      end
    end
  end
  m[3] = 0
end

-- cal_read returns what calendar key key holds in the period that starts
-- at start, from cal_memo or else from Redis, and its memo entry. An
-- allow that fits so far (tentative) adds cost at once (HINCRBY: one call
-- where a read and a write would take two); the memo then marks it
-- pending until the op is admitted (the admission counts it in the memo
-- entry), or taken back by flush_cal.
function cal_read(key, start, cost, cost_arg, tentative)
  cal_memo = cal_memo or {}
  local m = cal_memo[key]
  if m and m[1] == start then
    return m[2], m
  end
  if m then
    flush_cal_key(key, m)
  end
  local used
  if tentative then
    -- cost_arg, the string: redis.call formats a number with %.17g.
    used = cal_call('HINCRBY', key, start, cost_arg) - cost
    m = {start, used, cost, false}
  else
    -- What the period counts: 0 when it holds no count of it.
    local v = cal_call('HGET', key, start)
    used = v and num(v) or 0
    m = {start, used, 0, false}
  end
  cal_memo[key] = m
  return used, m
end

-- flush_cal writes the counters of cal_memo, or only key's when key is
-- given, and forgets them.
function flush_cal(key)
  if not cal_memo then
    return
  end
  for k, m in pairs(cal_memo) do
    if not key or k == key then
      flush_cal_key(k, m)
      cal_memo[k] = nil
    end
  end
end

-- Finish steps. finish_op runs one step per key of a finish op, named
-- for what it does there, each returning 1 when it changed the key, 0
-- when not (finish_weight: 2 for a refused change): finish_remove takes
-- out a count key's entry or a slot key's slot (a release: one ZREM),
-- finish_weight changes a weighted entry (see Weighted changes),
-- finish_calendar a calendar counter (a record and one HINCRBY, see
-- Calendars) and
-- finish_restore a distinct value (see Distinct).

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
  for s = 1, num(args[2]) do
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

-- change_newest changes by delta, in mode md (see Weighted changes), the
-- request whose member is m in weighted key key when its entry is the
-- key's newest, as a request finished soon after its admission mostly is:
-- ZPOPMAX reads and removes it in one call, and ZADD adds it back renamed
-- with its new total (a debt or a refund above -cost: two calls; else a
-- read of the entry before tells what is left of its weight). It returns
-- what change_weight returns, or when the newest entry is another
-- request's, nil, that entry and its score, still popped: the caller puts
-- it back, or renames it as a later entry (see settle_entry). A weighted
-- key that held an entry holds markers, so the pop never empties it
-- (which would lose its expiry).
function change_newest(key, m, delta, md, cost)
  local top = call('ZPOPMAX', key)
  local x, score = top[1], top[2]
  if not x then
    return nil
  end
  if byte(score) == 45 then
    call('ZADD', key, score, x) -- a marker: the key holds no entry
    return nil
  end
  local rest = string.sub(x, 18)
  if rest ~= m then
    if rest == m .. '!' then
      call('ZADD', key, score, x)
      return 0 -- settled: neither settled again nor given back
    end
    return nil, x, score
  end
  local xt = string.sub(x, 1, 16)
  if ARITH_DEC then
    xt = xt + 0
  else
    xt = num(xt)
  end
  -- c: the change of the request's weight, never below minus that weight,
  -- whose base is the entry before (its weight is at least cost).
  local c, prev = delta, -1
  if delta <= -cost then
    prev = 0
    local below = call('ZRANGE', key, '-1', '-1', 'WITHSCORES')
    if below[1] and string.byte(below[2]) ~= 45 then
      prev = num(string.sub(below[1], 1, 16))
    end
    c = math.max(delta, prev - xt)
  end
  if c > 0 and xt + c > 9007199254740991 then -- TOTAL
    call('ZADD', key, score, x)
    return 2
  end
  if xt + c > prev then
    -- One format makes the name, where concatenations would make a string
    -- each.
    if md == 'r' then
      call('ZADD', key, score, fmt('%016d:-', xt + c)) -- it stands for merged requests
    else
      call('ZADD', key, score, fmt('%016d:%s!', xt + c, m))
    end
  end
  return 1
end

-- settle_entry settles by delta (> -cost: the entry keeps a weight) the
-- request whose member is m in weighted key key, admitted at at (as
-- sent: a ZRANGE bound needs no number), whose
-- entry is not the newest: y, popped by change_newest, scored ys (nil
-- when the key held no entry). When the entries from at on, read in one
-- call, hold the request's entry and with y at most WEIGHT_MOVE after it,
-- it makes the change change_weight would: the request's entry, each
-- later one and y get their new totals, y without another removal, so a
-- settlement costs no more calls than a read first would. It returns nil
-- for every other case (y put back: change_weight reads again), else as
-- change_weight.
function settle_entry(key, m, at, delta, y, ys)
  local es = call('ZRANGE', key, at, '+inf', 'BYSCORE', 'LIMIT', '0', '132', 'WITHSCORES') -- WEIGHT_READ
  local done, found, r = m .. '!', nil, nil
  if #es < 264 then -- 2 * WEIGHT_READ: else more follow
    for i = 1, #es, 2 do
      local rest = string.sub(es[i], 18)
      if rest == done then
        r = 0
        break
      end
      if rest == m then
        found = i
        break
      end
    end
  end
  local later = 0
  if found then
    later = (#es - found - 1) / 2
    if y then
      later = later + 1
    end
  end
  local newest = y or es[#es - 1]
  if found and later <= 64 and delta > 0 and num(string.sub(newest, 1, 16)) + delta > 9007199254740991 then -- TOTAL
    found, r = nil, 2
  end
  if not found or later > 64 then -- WEIGHT_MOVE
    if y then
      call('ZADD', key, ys, y)
    end
    return r
  end
  for j = found, #es, 2 do
    local mj = es[j]
    local tag = string.sub(mj, 17)
    if j == found then
      tag = ':' .. done
    end
    call('ZREM', key, mj)
    call('ZADD', key, es[j + 1], fmt('%016d', num(string.sub(mj, 1, 16)) + delta) .. tag)
  end
  if y then
    call('ZADD', key, ys, fmt('%016d', num(string.sub(y, 1, 16)) + delta) .. string.sub(y, 17))
  end
  return 1
end

-- finish_weight runs the change in mode mode of weighted key key whose
-- fields start at args[q] for member ms (see Weighted changes). The
-- decision time at is read only where needed: the common change, of the
-- key's newest entry, needs no time.
function finish_weight(key, q, mode, ms)
  local delta, cost = args[q + 1] + 0, args[q + 3]
  cost = conf[cost] or conf_num(cost)
  if type(ms) == 'string' then
    local changed, y, ys = change_newest(key, ms, delta, mode, cost)
    if changed then
      return changed
    end
    if mode == 's' and args[q + 2] ~= '0' and delta > -cost then
      changed = settle_entry(key, ms, args[q + 2], delta, y, ys)
    elseif y then
      call('ZADD', key, ys, y)
    end
    if changed then
      return changed
    end
  end
  if not change_weight then
    weight_functions()
  end
  local grain = 0
  if mode == 'g' then
    grain = num(args[q + 4])
  end
  return change_weight(key, delta, mode, num(args[q + 2]), grain, ms, cost)
end

-- finish_calendar adds delta to the count of the period starting at start
-- in calendar key key (fields 'A', start, delta from args[q]; see
-- Calendars) once per member (its record) with one HINCRBY, which also
-- tells what the period held: a
-- period without a field (it held 0: it is over) is left without one,
-- and a count never falls below 0 (at 0 the field is deleted).
function finish_calendar(key, q, member)
  flush_cal(key)
  local start = args[q + 1]
  if start == '' then
    return 0
  end
  -- A counter keeps no member to remove: the op's record makes it run
  -- once, though a timed-out call that Redis ran is retried.
  local record = '-' .. member
  if cal_call('HSETNX', key, record, '1') == 0 then
    return 0
  end
  local after = cal_call('HINCRBY', key, start, args[q + 2])
  local before = after - num(args[q + 2])
  if before <= 0 then
    -- The period is over: no count, no record (an emptied hash is gone).
    call('HDEL', key, start, record)
    return 0
  end
  if after <= 0 then
    call('HDEL', key, start)
  end
  call('HSET', key, 'm', start)
  return 1
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
  reply[n] = 1 -- ADMITTED
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

-- The steps of an allow or peek op that run leaves to functions: the
-- keys an op of the download group or the 2-window group does not have
-- (slot keys aside), and what follows the decision. read_slot,
-- read_distinct (above), read_calendar and read_block read the key at at (see
-- key_state in run), whose fields start at args[q], into the reply and
-- key_state, and return the index of the next key's fields and whether
-- the key has room.

-- read_slot reads slot key key (see Slots): it has room when fewer than
-- its limit of slots are live.
function read_slot(key, q, at)
  local key_state = key_state_table
  local used = call('ZCOUNT', key, t_arg, '+inf')
  n = n + 1
  reply[n] = used
  local lease = conf_num(args[q + 3])
  key_state[at - 2], key_state[at - 1], key_state[at] = 0, lease, fmt('%d', t + lease)
  return q + 4, used < conf_num(args[q + 2])
end

-- read_calendar reads calendar key key (see Calendars) for an op that
-- adds its cost at once when tentative (see cal_read); instead of the
-- next index it returns nil and the error when t lies outside the key's
-- periods. key_state[at], the period's start, keeps it out of add_member
-- and the bookkeeping; -2 marks it for the admission to count
-- key_state[at - 1], the op's cost, in its memo entry, and
-- key_state[at - 3] is the expiry a period's first admission sets.
function read_calendar(key, q, at, tentative)
  local key_state = key_state_table
  cal_fields = cal_fields or {}
  local f = cal_fields[key]
  local next_q = q + 2
  if args[q + 1] ~= 'q' then
    next_q = q + 5
    if args[q + 1] == 'P' then
      next_q = q + 8 -- q + 4 + CAL_BOUNDS
    end
    -- A 'Q' field i names the boundaries; a 'P' key sends its own.
    if not (args[q + 1] == 'Q' and f and f[7] == args[q + 4] and f[5] == args[q + 2] and f[6] == args[q + 3]) then
      local bounds = q + 4
      if args[q + 1] == 'Q' then
        bounds = num(args[q + 4])
      end
      local start, stop = calendar_period(bounds)
      if not start then
        return nil, 'ERR slidelimit: time outside the calendar boundaries of ' .. key
      end
      f = {start, stop, conf_num(args[q + 2]), conf_num(args[q + 3]), args[q + 2], args[q + 3], args[q + 4]}
      cal_fields[key] = f
    end
  elseif not f then
    return nil, 'ERR slidelimit: calendar key without fields ' .. key
  end
  local start, stop, cost = f[1], f[2], f[3]
  local used = cal_read(key, start, cost, f[5], tentative)
  n = n + 1
  reply[n] = used
  n = n + 1
  reply[n] = stop - t
  -- The period's first admission sets the expiry; later ones keep it.
  key_state[at - 3] = used == 0 and fmt('%d', ceil((stop - t) / 1000) + 1000) -- CAL_MARGIN
  key_state[at - 2], key_state[at - 1], key_state[at] = -2, cost, start
  return next_q, used + cost <= f[4]
end

-- read_block reads block key key (see Blocks) after a key with room or
-- not (key_fits) for an op of member (a peek's is empty): it has room
-- unless a block is in force. key_state[at] true (and no longest period)
-- keeps it out of the admission and the bookkeeping.
function read_block(key, q, at, key_fits, member)
  local key_state = key_state_table
  key_state[at - 2], key_state[at - 1], key_state[at] = -1, false, true
  local left, ends, open = 0, call('GET', key), true
  ends = ends and (num(ends) or sci(ends))
  if ends and ends > t then
    left, open = ends - t, false
  elseif not key_fits and member ~= '' then
    left = conf_num(args[q + 2])
    call('SET', key, fmt('%d', t + left), 'PX', fmt('%d', ceil(left / 1000)))
  end
  n = n + 1
  reply[n] = left
  return q + 3, open
end

-- count_admitted counts an admitted op in the nkeys keys after KEYS[first]
-- beyond its member (added by add_member and admit_weighted): a distinct
-- value, a calendar count, and each key's bookkeeping, unless the op's
-- memo entries (key_memo, in ops the engine marked: remember) say it ran
-- at t already.
function count_admitted(first, nkeys, remember, key_memo)
  local key_state = key_state_table
  for k = 1, nkeys do
    local at = 4 * k
    if key_state[at] == 'D' or key_state[at] == 'd' then
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
      if call('ZADD', key, 'CH', dec(-(2251799813685248 + floor(t / lease))), 'e') == 1 then -- EPOCH
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
-- (remember; key_memo as in run), with added 1 when it added an entry;
-- any other key is forgotten.
function remember_op(first, nkeys, remember, key_memo, added)
  local key_state = key_state_table
  for k = 1, nkeys do
    local at = 4 * k
    local m
    if remember and not key_state[at] and key_memo[2 * k - 1] < 131072 then -- SLOTS
      m = ((key_state[at - 3] + 2) * 131072 + key_memo[2 * k - 1]) * 2 + added -- SLOTS
    end
    memo[keys[first + k]] = m
  end
end

-- run decides one call: keys and argv are its KEYS and ARGV. It holds
-- the call's main loop, and first sets every variable of the call's
-- state (above), so that nothing is left from the call before: the EVAL
-- form of this script (lua/lua.go) runs the whole chunk and then run,
-- each call, and the Redis Function form registers run, which is all a
-- call then runs, its helpers (and their closures) created once, at
-- FUNCTION LOAD.
function run(ks, argv)
  call, fmt, num, floor, ceil, byte = redis.call, string.format, tonumber, math.floor, math.ceil, string.byte
  keys, args = ks, argv
  reply = reply_table
  t_arg = args[1]
  -- t 0 is the server's TIME, read at the first op that is not a finish
  -- op: finish ops change entries by member and need no time, so a call
  -- of finish ops alone runs no TIME (its reply's sec and usec are 0).
  -- '0', the engine's usual t, needs no tonumber.
  t, reply[1], reply[2] = 0, 0, 0
  if t_arg ~= '0' then
    t = num(t_arg)
    reply[2] = t % 1000000
    reply[1] = (t - reply[2]) / 1000000 -- exact: no rounding of t / 10^6
  end
  n = 2
  memo, cal_memo, cal_fields = nil, nil, nil
  span_end, span_start, span_stop = nil, nil, nil

  -- Per key k of the current op, key_state[4k-3 .. 4k] holds where its
  -- fields start, its longest period, whether it is busy, and false for a
  -- count key or the state of a weighted one (see weigh); for a slot key:
  -- where its fields start, 0, its lease and its members' score (a
  -- string); for a block key: where its fields start, -1, false and true.
  -- One table rather than four, as each costs about 1,000 instructions per
  -- call, made with room for one key. In ops the engine marked (see memo),
  -- key_memo[2k-1 .. 2k] holds the reply index of its first window and
  -- whether its bookkeeping already ran at t.
  local key_state = key_state_table
  local key_memo


  local p = 3 -- the current op's first field
  local used_keys = 0 -- KEYS used by the previous ops
  local nargs = #args
  while p <= nargs do
    -- Finish ops (member starting with '-') may come anywhere among the others.
    while p <= nargs and byte(args[p]) == 45 do
      p, used_keys = finish_op(p, used_keys)
    end
    if p > nargs then
      break
    end
    if t == 0 then
      -- TIME's seconds and microseconds (unpadded) joined as text: one
      -- number to parse, and none to format for t_arg (see Cost).
      local now = call('TIME')
      t_arg = now[1] .. (USEC_PAD[#now[2]] or string.sub('00000', #now[2])) .. now[2]
      t = num(t_arg)
      reply[2] = t % 1000000
      reply[1] = (t - reply[2]) / 1000000
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
    local fits = true
    local key_fits = true -- whether the previous key had room (see Blocks)
    local weighted = false -- whether the op has a weighted key
    local q = p + 2
    for k = 1, nkeys do
      local key = keys[used_keys + k]
      local nwin = args[q]
      nwin = conf[nwin] or conf_num(nwin)
      local at = 4 * k
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
          local r = m % 131072 -- SLOTS
          q, key_fits, longest_used, longest, added_at = count_windows(key, q + 2, nwin, (m - r) / 131072, r, added)
        else
          q, key_fits, longest_used, longest = count_windows(key, q + 2, nwin)
        end
        fits = fits and key_fits
        local busy = longest_used >= 64 -- BUSY
        key_state[at - 2], key_state[at - 1], key_state[at] = longest, busy, false
        if added_at then
          -- The op that added an entry ran the bookkeeping of the key's epoch
          -- marker at t; if this op's marker is the same, there is none left.
          key_memo[2 * k] = (added_at >= 64) == busy -- BUSY
        end
      elseif nwin < 0 then
        if not weigh then
          weighted_functions()
        end
        local state
        weighted = true
        q, key_fits, state = weigh(key, q + 2, -nwin)
        fits = fits and key_fits
        key_state[at - 2], key_state[at - 1], key_state[at] = conf_num(args[state[4]]), true, state
      else
        local kind = args[q + 1]
        if kind == 'S' then
          -- A slot key has no block key: key_fits stays the previous key's.
          local slot_fits
          q, slot_fits = read_slot(key, q, at)
          fits = fits and slot_fits
        elseif kind == 'D' then
          q, key_fits = read_distinct(key, q, at)
          fits = fits and key_fits
        elseif kind == 'P' or kind == 'Q' or kind == 'q' then
          q, key_fits = read_calendar(key, q, at, fits and member ~= '')
          if not q then
            flush_cal()
            return redis.error_reply(key_fits)
          end
          fits = fits and key_fits
        elseif kind == 'B' then
          local open
          q, open = read_block(key, q, at, key_fits, member)
          fits = fits and open
        else
          flush_cal()
          return redis.error_reply('ERR slidelimit: unknown key kind ' .. kind)
        end
      end
    end
    local status, suffix = 0, 0 -- DENIED
    if fits then
      status = 1 -- ADMITTED
    end
    if fits and member ~= '' then
      local m
      suffix, m = add_member(used_keys, nkeys, key_state, member)
      if not suffix then
        status, suffix = 2, 0 -- COLLISION
      else
        -- Weighted members hold their running total, so they are unique:
        -- they are added once the member's suffix is known.
        for k = 1, weighted and nkeys or 0 do
          local state = key_state[4 * k]
          if type(state) == 'table' then
            local err = admit_weighted(keys[used_keys + k], state, m)
            if err then
              flush_cal()
              return err
            end
          end
        end
        count_admitted(used_keys, nkeys, remember, key_memo)
      end
    end
    reply[code] = status + 4 * suffix
    if memo then
      -- An op the engine did not mark may share a key all the same: every op
      -- of a call with a memo updates it, unmarked ones by forgetting.
      local added = 0
      if status == 1 and member ~= '' then -- ADMITTED
        added = 1
      end
      remember_op(used_keys, nkeys, remember, key_memo, added)
    end
    p = q
    used_keys = used_keys + nkeys
  end

  flush_cal()
  reply[n + 1] = nil
  return reply
end
