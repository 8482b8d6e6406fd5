-- multi_window.lua: exact multi-window sliding logs in sorted sets.
--
-- This header is the specification of the script's wire format, the only
-- one: engine/script.go builds its arguments and reads its reply. The engine
-- package documentation (engine/doc.go) states the semantics this script
-- implements; the design notes after the stored state say how.
--
-- Parts. This file is the script's entry point: its spec, the chunk's
-- declarations and shared state, and run, which decides a call. Its
-- steps live in sibling files, which lua/lua.go joins after this one, in
-- this order, into one chunk (lua/number.lua first):
--   mw_op.lua             an allow or peek op: read its keys, admit it
--   mw_count.lua          count keys, epochs and bookkeeping; slot and
--                         block keys
--   mw_weighted.lua       weighted keys at an admission
--   mw_distinct.lua       distinct keys
--   mw_calendar.lua       calendar keys
--   mw_finish.lua         finish ops
--   mw_weight_change.lua  a finish op's change of a weighted key
--   mw_regions.lua        a key's copies (see Regions)
-- The source names each constant by a placeholder, its name in braces
-- after a dollar sign, which lua/lua.go replaces with its value, defined
-- once in Go (see Constants below).
--
-- Arguments. Every argument is a string; a number is a decimal integer
-- written without sign (unless negative), leading zeros or exponent.
-- Times and periods are in microseconds since 1970.
--   ARGV[1]  t: the decision time, or 0 to use the server's TIME (read
--            at the first op that is not a finish op). t must
--            exceed every period and stay below 2^53.
--   ARGV[2]  max_suffix: how many suffixed members an admission tries
--            after collisions (the engine's maxSuffix, which is the one
--            definition of that limit); negative (-max_suffix) when each
--            op of the call is a part of a request whose other keys
--            other calls decide: every window's oldest entry is then
--            replied (see unread).
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
--       0, 'B', block            the block key of the key just before it,
--                                or before that key's 'U' fields
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
--       0, 'U', r, R             the count key just before it again,
--                                for its copies (see Regions): r is
--                                this region's index among the R
--                                regions ordered by name.
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
--   Library; same KEYS, ARGV and reply):
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
-- the window's oldest entry, or 0 when it was not read (a count key's
-- window at most an eighth full, or its last window with more room than
-- another, in an op that neither was denied nor filled a window: see
-- unread); edge, present when the request does not fit
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
-- ends (0: not blocked). The reply of 'U' fields is one integer, left:
-- 0 when every window of its count key has room for this region's share, else
-- the most time until an entry that holds one back leaves the window; with
-- room where U was counted, -1 - room, room the least that the share leaves.
--
-- Regions. With regions (engine WithRegions; docs/regions.md, which
-- proves the bound), an op whose count key (KEYS[i]) is followed by 'U'
-- fields (naming the same key again, KEYS[i+1]) also needs, per window
-- of the count key (period P, limit L),
-- U + 1 <= floor((max(L - (V - U), 0) + r) / R), where V is the window's
-- count and U its entries that have a copy in the key: this region's
-- admissions its peers have not all acknowledged. A copy is member 'u'
-- and the entry's member, scored -(COPY + t): below every marker and
-- entry, so no read of a window sees it, and the count's upper bound
-- -(COPY + t - P + 1) selects the copies of the window's entries. An
-- admission adds its copy (one ZADD); the key's bookkeeping trims copies
-- with its entries (one more ZREMRANGEBYSCORE per epoch), and they
-- expire with the key; the engine removes a copy (ZREM) once every peer
-- has the entry, and writes peers' entries to their own count keys
-- (ZADD, never here), with a marker of its own, 'p' and an epoch length,
-- scored as the epoch markers (internal/regions, applySrc). A denial by the share starts no block unless a
-- window is full for the region's share (V > L - R + r, see
-- read_unstable): only an entry leaving makes room then, as in a full
-- window, and the key's block starts. Scores stay
-- exact doubles until t reaches 2^52 µs (the year 2112); copies stay
-- below the epoch markers while floor(t / epoch length) < 2^51: epochs
-- are at least 125 µs (periods are whole milliseconds, a busy key's
-- epoch an eighth of its longest), far from that bound.
-- prefix{regions}:set (not this script's) holds a hash of the region
-- set each process of the region runs, for 24 h (internal/regions,
-- CheckSet), which logs processes that disagree; prefix{regions}:behind:
-- and a peer's name, for 5 s, says a process of the region has entries
-- it could not send to that peer (internal/regions, BehindKey).
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
-- instead of once per admission. A longer window's oldest entry is read
-- even where no caller reports it: it gives the shorter window's count
-- when it lies inside that window (reading only the reported window's and
-- counting every window with ZCOUNT was measured and saved 1-5% for keys
-- whose entries spread beyond the shortest window but cost 24-28% more for
-- keys whose entries all lie in it: bursts, denials). The last window's,
-- which gives nothing more, is read only where it is reported (see
-- unread). A batch
-- of decisions on one key (a hot key under load) reads the key once: the
-- later ops derive their counts from the earlier op's (see memo), which
-- leaves one ZADD per decision and halves the call's instructions for 16
-- decisions on a key. An EVAL runs this whole chunk, so the local
-- functions below are closures created anew every call (about 3.5 µs of
-- a decision's 5-6 on Redis 7.0, measured with INFO commandstats), and
-- each upvalue they capture costs: the memo's work is inline, in the
-- ops the engine marked, constants are literals once joined, and the
-- locals are declared in the order that makes binding upvalues cheapest
-- (see Declarations). The engine therefore loads the script as a
-- Redis Function where it can (lua/lua.go, Library): the
-- chunk then runs once, at FUNCTION LOAD, and each FCALL runs only run,
-- which resets the call's state (see run). The library also keeps pure
-- memos from call to call (conf, decs, marks, lo_text): the numbers of
-- configuration fields and the %d texts that recur, which spare about
-- half of a decision's Lua work on tonumber and string.format.

-- Declarations. Every local of the chunk is declared here, functions
-- too (each defined below or in a part by assignment), in an order that
-- matters to the EVAL form, which runs the whole chunk each call: Lua 5.1
-- binds each upvalue of each closure it creates by walking the chunk's
-- captured locals from the top of the stack down to it, so a local
-- declared early and captured often costs a walk past every captured
-- local declared after it, each time. The order below is the one that
-- the fewest walk steps were counted for (from the bytecode, simulating
-- the closures in the order the joined chunk makes them): 2,331 per
-- EVAL, against 5,700 in the order of the parts. FCALL binds nothing per
-- call, and reads an upvalue the same wherever it was declared. call,
-- fmt, num, floor, ceil and byte are Redis's and Lua's functions, which
-- run sets: a Redis Function's library is loaded where only
-- redis.register_function and redis.log exist (no string, math or
-- redis.call), so nothing at the top level may call anything.
-- read_unstable (mw_regions.lua) is declared below the others: its one
-- capture, by read_keys, is the only walk it adds to an EVAL.
local read_unstable
local run
local conf_n, decs_n, reply_table, finish_op, decide_op, USEC_PAD, cal_fields, span_end, read_keys
local span_start, add_member, admit_weighted, count_admitted, remember_op, key_memo, span_stop
local count_windows, weigh, read_slot, read_distinct, flush_cal, read_calendar, read_block, bookkeep
local derive_windows, marks, decs, marks_n, byte, ceil, t_arg, memo, weighted_edge, cal_memo
local lo_text, conf, floor, keys, lo_num, key_state_table, dec, cal_migrate
-- Numbers read back from Redis (scores, stored values) are read as
-- num(s) or sci(s): see lua/number.lua, which precedes this script and
-- declares sci first (at the bottom of the stack); sci is declared again
-- here, for the walks.
local sci = sci
local calendar_period, cal_read, reply, n, t, flush_cal_key, cal_call, conf_num, finish_remove
local finish_members, finish_calendar, finish_restore, finish_weight, args, change_newest
local settle_entry, change_weight, ARITH_DEC, find_entry, fmt, rewrite_entry, charge_newest, num
local call, unread, unread_n, read_all, suffix_text, fills

-- Constants. The source writes each as a placeholder (see Parts), which
-- lua/lua.go replaces with its value when it joins the parts: a literal,
-- as a local would be one more upvalue for each EVAL to bind (see the
-- declarations above). EPOCH, 2^51, offsets epoch markers below every
-- -retention; COPY, 2^52, a region's copies below every epoch marker
-- (see Regions). BUSY, 64 entries in a key's longest window, make it busy:
-- its epochs, and so its trims, come 8 times per window instead of once.
-- MAX_TOTAL, 2^53 - 1, bounds a weighted key's running total, which then
-- stays exact in a double. An op's status in the reply is DENIED,
-- ADMITTED or COLLISION. MINUS is the byte of '-', which starts a finish
-- op's member and a marker's score. SECOND is one second in µs. SLOTS,
-- CONF_MAX, MERGE_SCAN, WEIGHT_MOVE, WEIGHT_READ, CAL_BOUNDS and
-- CAL_MARGIN are described where they are used. COUNT_MAX, 2^30, lies
-- above every count key's count and below every time (see Regions).

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
-- per step), and key_state (below). A Function's library keeps them
-- from call to call, which spares it making two tables each time: run
-- writes every field it reads first, and Redis ends an array reply at
-- its first nil, which run sets after the last field, so what a longer
-- earlier call left beyond it is never read. (An EVAL runs the whole
-- chunk, so its tables are new each call.)
-- Per key k of the current op, key_state[4k-3 .. 4k] holds where its
-- fields start, its longest period, whether it is busy, and false for a
-- count key or the state of a weighted one (see weigh); for a slot key:
-- where its fields start, 0, its lease and its members' score (a
-- string); for a block key: where its fields start, -1, false and true.
-- One table rather than four, as each costs about 1,000 instructions per
-- call, made with room for one key.
reply_table, key_state_table = {0, 0, 0, 0, 0, 0, 0, 0}, {0, 0, 0, 0}

-- unread holds, for the current op, the windows whose oldest entry its
-- reply leaves out, three fields each: the reply index of that entry's
-- score, the key and the window's used, or false and the score when it is
-- known without a read. An op replies the oldest entry of every window
-- that has entries, except, in a count key, a window at most an eighth
-- full with the op counted ((used + 1) * 8 <= limit), and the last
-- (shortest) window when it has room and more room than another window of
-- its key. A client reports the window with the least room (its Reset,
-- the RateLimit field's t) and, far from its limit, needs no exact time:
-- the period is an upper bound of when the oldest entry leaves. The reply
-- then holds 0 there, which no entry's score is, unless the op is denied
-- or fills a window (used + 1 >= limit, fills): decide_op then reads them
-- (a denial reports every window, and cached denials, learned from the
-- admission that fills a window too, need every window's Reset). Ops
-- that derive a key's windows (derive_windows) reply the same.
-- unread_n is its length; decide_op resets it and fills. A Function's
-- library keeps the table from call to call, like reply. read_all (a
-- negative max_suffix) says that the call decides a part of each request
-- only (the engine's calls per hash slot or per server, whose other parts
-- other calls decide): its ops reply every oldest entry. suffix_text is
-- the max_suffix read_all was found in, a pure memo: a string.byte costs
-- about 1,000 instructions, comparing two strings Redis interned one.
unread, unread_n = {}, 0

-- memo maps a count key to where the call's last op on it left its
-- windows, for ops the engine marks as sharing a key with another op of
-- the call (see nkeys): (q * SLOTS + r) * 2 + a, with SLOTS 2^17, q
-- the index of the key's first period in args, r the reply index of its
-- first window's used, and a 1 when that op added an entry. Nothing else
-- writes the key within the call, so a later op with the same periods
-- derives its windows from that op's instead of reading them again. In
-- ops the engine marked, key_memo[2k-1 .. 2k] holds the reply index of
-- key k's first window and whether its bookkeeping already ran at t.

-- conf maps a configuration field (nkeys, nwin, a period, limit, cost,
-- grain, lease, block or suffix: never a member, time or score) to its
-- num, read as conf[s] or conf_num(s): an interned string's lookup costs
-- a tenth of a tonumber, and a decision reads six or more such fields. A
-- pure memo (it holds exactly num(s)), so a Function's library keeps it
-- from call to call (an EVAL starts it empty); cleared at CONF_MAX
-- entries, as limits may differ per request.
conf, conf_n = {}, 0

-- conf_num returns num(s), remembered in conf.
function conf_num(s)
  local v = conf[s]
  if v then
    return v
  end
  v = num(s)
  if v then
    if conf_n >= ${CONF_MAX} then
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
    if decs_n >= ${CONF_MAX} then
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

-- run decides one call: keys and argv are its KEYS and ARGV. It parses
-- the call's time and sets every variable of the call's state (above),
-- so that nothing is left from the call before; decides its ops in order
-- (finish_op, decide_op); and replies. The EVAL form of this script
-- (lua/lua.go) runs the whole chunk and then run, each call; the Redis
-- Function form registers run, which is all a call then runs, its
-- helpers (and their closures) created once, at FUNCTION LOAD.
function run(ks, argv)
  call, fmt, num, floor, ceil, byte = redis.call, string.format, tonumber, math.floor, math.ceil, string.byte
  keys, args = ks, argv
  reply = reply_table
  t_arg = args[1]
  if args[2] ~= suffix_text then -- see unread
    suffix_text, read_all = args[2], byte(args[2]) == ${MINUS}
  end
  -- t 0 is the server's TIME, read at the first op that is not a finish
  -- op: finish ops change entries by member and need no time, so a call
  -- of finish ops alone runs no TIME (its reply's sec and usec are 0).
  -- '0', the engine's usual t, needs no tonumber.
  t, reply[1], reply[2] = 0, 0, 0
  if t_arg ~= '0' then
    t = num(t_arg)
    reply[2] = t % ${SECOND}
    reply[1] = (t - reply[2]) / ${SECOND} -- exact: no rounding of t / 10^6
  end
  n = 2
  memo, key_memo, cal_memo, cal_fields = nil, nil, nil, nil
  span_end, span_start, span_stop = nil, nil, nil

  -- The ops, in order: finish ops (member starting with '-') may come
  -- anywhere among the others.
  local p, used_keys, nargs = 3, 0, #args
  while p <= nargs do
    if byte(args[p]) == ${MINUS} then
      p, used_keys = finish_op(p, used_keys)
    else
      local err
      p, used_keys, err = decide_op(p, used_keys)
      if err then
        flush_cal()
        return err
      end
    end
  end

  -- The reply: every calendar count written, the array ended.
  flush_cal()
  reply[n + 1] = nil
  return reply
end
