// Package engine makes exact multi-window sliding-window rate-limit
// decisions in Redis.
//
// # Semantics
//
// A window of period W and limit L admits a request at time t iff fewer
// than L requests were admitted in (t-W, t]. A Request holds checks, each a
// limiter (a set of windows) applied to one subject; it is admitted iff
// every window of every check admits it, and then it is counted in all of
// them, otherwise in none. There is no approximation: no buckets, no
// interpolation between fixed windows. Checks of one request that count in
// the same key (same scope, kind, name and subject) are merged: the union
// of their windows, the smaller limit where periods are equal, and one
// entry for the request.
//
// # Costs and grains
//
// A check counts its cost: Check.Cost, or when that is 0 the constant cost
// of its limiter (Limiter.Cost "5"), or 1. A window of limit L then admits
// a request of cost c at t iff the costs admitted in (t-W, t] sum to at
// most L-c; Used and Remaining are in cost units, and RetryAfter is the
// time until enough cost has left every window for c to fit. A cost above
// a window's limit could never be admitted: Allow returns a RequestError
// naming the check and window instead. A cost above 1 needs a limiter with
// a cost (Limiter.Cost), because such a limiter is its own key (see
// Storage): user and user[bytes] never share a log.
//
// A window with a grain g (rules.Window.Grain) lets the engine merge the
// requests of one grain into one entry, which leaves the window with the
// latest of them. It never admits more than L in any span of its period
// and denies at most one grain earlier than an exact window would: an
// entry stands for requests less than g apart, none of which leaves the
// window before the entry does. Windows without a grain stay exact, also
// in a key with grained windows.
//
// Time is the Redis server's TIME in microseconds, read inside the script,
// so application clocks never matter. (WithClock, for tests, passes the
// time in the script's arguments instead.) On a Redis Cluster each key
// lives on one node and uses that node's clock, so every window stays
// exact even when node clocks differ. A clock that goes back (an NTP step,
// a failover to a replica whose clock is behind) never hides an entry: a
// window counts every entry from t-W+1 on, including those scored after t,
// which errs on the side of denying until the clock has caught up.
//
// # Storage
//
// Each (scope, limiter kind and name, subject) is one sorted set, keyed
//
//	prefix{scope|kind|subject}   or, for named kinds,   prefix{scope|kind:name|subject}
//
// for example slidelimit:{GET%20/files/%7Bid%7D|user|42}. Scope, kind,
// name and subject are percent-encoded: '%', the separators '|' and ':',
// the braces, '#', space and control bytes become %XX, so distinct triples
// never share a key and no client-supplied byte can end or open the braces.
// The braces make the whole encoded triple the Redis Cluster hash tag:
// every key is its own slot. A subject longer than 128 bytes (or every
// subject, with WithHashSubjects) is stored as '#' and the unpadded
// base64url SHA-256 (HMAC-SHA-256 with a secret) of its bytes; a raw
// subject never holds '#', so the two forms cannot meet.
//
// A member is one admitted request: a snowflake id in decimal (unique per
// process node, see WithNode) scored by its admission time in µs. The
// script lua/multi_window.lua, whose header specifies its arguments and
// reply (the wire format), runs one call per decision (or per batch of
// concurrent decisions):
//
//  1. counts, per window, ZCOUNT key t-W+1 +inf (scores are integers, so
//     this is (t-W, t], and entries after t only exist when the clock went
//     back); reads the oldest entry in the window, which gives Reset
//     (oldest + W - t); and, for a full window, the entry at rank used-L of
//     the window, which gives the wait (that entry + W - t): the request
//     fits once the used-L+1 oldest entries have left, and only the last
//     of those is read, never the whole window. Windows are read longest
//     first, and a shorter one is derived without a call when the longer
//     one is empty or its oldest entry is inside the shorter one, because
//     each redis.call costs about as much Redis CPU as the command itself;
//  2. if any window is full, denies and writes nothing at all, not even a
//     trim;
//  3. otherwise adds the member with ZADD NX to every key. A member already
//     present (two processes sharing a snowflake node in the same
//     millisecond) must not count the request less than once, so the keys
//     added so far are rolled back and the whole add is retried with a
//     suffixed member;
//  4. then keeps each key's bookkeeping: the retention, the trim of
//     entries older than it, and the expiry.
//
// Keys can be shared by groups whose longest windows differ (handlers
// sharing a scope). Trimming by one group's longest window would delete
// entries another group's longer window still needs, and guessing the
// other groups' needs from the key's TTL is wrong (the TTL says when the
// key dies, not how far back its windows reach). So each key remembers its
// retention in a marker member "r" scored -retention: every window (t-W, t]
// has t-W > 0, so a negative score is never counted, and trims start at 0,
// so markers are never trimmed. The retention is max(marker, this group's
// longest window); the marker is rewritten only when it grows, so it only
// grows while the key lives (it resets when the key expires, which happens
// only after every entry has left every window). A key learns a group's
// window only when that group first admits in it: until then the shorter
// groups trim by their own retention, so a group with a longer window
// that starts using a live key (a new handler sharing the scope, a
// deployment that lengthens a window) sees at first only the entries
// the others kept, and may admit more than its limit during its first
// window.
//
// # Weighted keys
//
// A limiter with a cost, or without one but with a grained window, is
// stored in a weighted key, named with a fourth segment, the cost:
//
//	prefix{scope|kind:name|subject|cost}   for example   slidelimit:{GET%20/files/%7Bid%7D|user|42|bytes}
//
// where a count limiter with grains takes the cost "1" (the same key as
// user[1], which counts the same). Count keys keep their three segments,
// so the two formats never share a key.
//
// A member of a weighted key is the running total of the costs admitted
// in the key (16 digits, zero-padded, so that members of equal score sort
// by total), ':' and the request's member, scored by its admission time, or
// by the newest entry's score when that is later (the clock went back):
// scores never decrease along totals. A window's sum is the newest total
// minus the total of the last entry before the window (0 when there is
// none): two lookups for any number of entries. A denial finds the entry
// whose departure makes room by a binary search over ranks. The trim keeps
// the newest entry it could remove, whose total is the base of every
// window. Totals restart when the key expires; a key whose total would
// pass 2^53 (2^53 units admitted within one life of the key) fails the
// call.
//
// Merging an entry into the next one is deleting it: the next entry's
// total already includes its cost, and it leaves the windows later. Each
// admission merges, per tier, the entries that reached it since the
// previous admission: tier j holds the entries older than every window
// shorter than W_j but inside W_j, and an entry there is deleted when the
// next entry lies in the same grain of tier j. A tier's grain is the finest
// grain of the windows an entry in it is still in (0, no merging, when one
// of them is exact), rounded down to a multiple of the next shorter tier's
// grain so that the grains nest (see nestGrains). So short exact windows
// keep individual entries only within their period, and a long grained
// window needs its grain only beyond the shorter windows: a key holds about
// the entries of its exact windows plus W/g per grained window, whatever
// the limits. Seed 001's group user:200/10s,5000/h~2m,20000/d~30m held 82
// members (4,168 bytes by MEMORY USAGE) after 20,000 admissions spread over
// a day, against 20,003 members (2.4 MB) for the exact group; a byte quota
// user[bytes]:2Gi/d~15m held 98 members (5.2 KB) after 2,048 downloads of
// 1 MiB. Keys shared by groups with different grains err by the coarsest
// one; at most 257 entries per tier are merged per admission, so a burst
// larger than that is merged only partly.
//
// Removing a request from a weighted key (a cluster rollback, the undo of
// a failed call, a GiveBack) runs lua/give_back.lua: it lowers the
// request's entry and every later entry by its cost, which is exact, and
// keeps the entry (without the request's member) when it stands for merged
// requests. With more than 64 later entries it only deletes the entry,
// whose weight then counts with the next one until that leaves (erring on
// the side of denying); a request merged into a later entry is not found
// and stays counted until that entry leaves. The removal reads the whole
// key.
//
// Weighted keys make no cached denials and seed nothing into the FailLocal
// fallback (a full window depends on the next request's cost): a request
// with a weighted key always asks Redis, and the fallback starts such keys
// from nothing. The fallback counts costs and treats grains as exact.
//
// Doing the bookkeeping (ZSCORE, ZREMRANGEBYSCORE, PEXPIRE) on every
// admission would cost three of a decision's six or so Redis calls, so it
// runs once per epoch instead: epochs of length I = the group's longest
// window W (or W/8 once the key holds 64 entries in it, so that a busy
// key's stale entries stay below an eighth of its window), numbered
// floor(t/I). Each admission writes the epoch number into an epoch marker
// ("e" followed by I, scored -(2^51 + epoch)) with ZADD CH, which reports
// a change only on the first admission of an epoch (or of an earlier one,
// after the clock went back); that admission trims, and sets the expiry to
// retention + I with PEXPIRE GT (plain PEXPIRE on a new key, and NX when
// GT refused because the key had lost its deadline, which GT would keep
// forever). Every later admission of the epoch happens before the
// epoch's start + I, so the key outlives each entry's retention. GT never
// shortens a deadline another group's epoch relies on, and when the
// retention grows all epoch markers are dropped, so every group's next
// admission sets a deadline with the new retention. Memory therefore stays
// within 1 + 1/8 of the live entries for busy keys; a quiet key may keep
// entries and live up to one window longer than strictly needed.
//
// RetryAfter is the exact time until the request fits in every window if
// nothing else is admitted meanwhile: the maximum of the waits of the full
// windows. Reset is per window the time until its oldest entry leaves.
//
// # Round trips and batching
//
// Concurrent Allow and Peek calls are batched: a caller that finds fewer
// than two batches in flight sends its own request at once (no added
// latency when alone); otherwise it queues, and the next batch carries
// every queued request (up to 64) in one script call, which decides them
// one after another, each atomically. On a single Redis server (a
// *redis.Client) a decision therefore costs at most one Redis call, shared
// with its batch. The script is run with EVALSHA; after NOSCRIPT (SCRIPT
// FLUSH, a restart, a promoted replica) the engine resends it with EVAL,
// and callers never see the error.
//
// On a Redis Cluster (a *redis.ClusterClient) keys of one request usually
// live in different slots and one script may only touch one slot, so the
// request is reserved with one script call per slot, one pipeline per
// server, the servers' pipelines sent concurrently: each
// call checks and adds in its slot. If any slot denies (or fails), the
// member is removed (ZREM) from every slot that admitted, before Allow
// returns. The request is thus never over-admitted and a request denied
// by Redis leaves no entry anywhere; while a reservation is being rolled
// back a concurrent request may see one entry too many, erring on the side
// of denying. RetryAfter is the maximum over the denying slots.
//
// # Cached denials
//
// The engine remembers per key what Redis last said about it: each
// window's count just after the decision, when its oldest entry leaves
// and, for a full window, when it has room again (at most WithLocalKeys
// keys). A later Allow whose keys are all known, with one window still full
// and no window whose oldest entry can have left since (so every count is
// still what Redis holds), is denied in-process without a Redis call
// (Source FromCache), reporting what a Redis denial at that moment would:
// the same Used, Remaining and denying window, and RetryAfter and Reset
// measured from the arrival of the answer, so never earlier than Redis's
// (later by at most the round trip). The deadline of the denial itself is
// measured from the moment the answer's call was sent, so it ends no later
// than in Redis: the cache never denies a request Redis would admit.
// Entries only leave a full window by time, except when a process removes
// them (Reset, GiveBack, a cluster rollback, the undo of a failed call):
// every removal is published on the channel prefix+"invalidate" after it
// took effect, every engine with cached denials subscribes to it, and an
// answer sent before an invalidation arrived is not kept. An engine that
// has not heard from its subscription for 0.8 s (it pings every 250 ms)
// makes no cached denial, nor from an answer older than 1 s (a key
// deleted behind the engines' backs, by hand or FLUSHALL, is asked again
// after at most that). Peek always asks Redis. See WithCachedDenials.
//
// # Failures
//
// Each Redis call has a timeout (WithTimeout). When Redis fails or times
// out, the request's fail mode (or the engine's, WithFailMode) decides:
// rules.FailOpen admits (Source FromFailOpen), rules.FailClosed denies
// (FromFailClosed), rules.FailLocal asks an in-process limiter with the
// same keys and semantics (FromLocal); the error is returned with the
// decision in every case. Every call asks Redis again, so decisions come
// from Redis again by themselves once it answers.
//
// The in-process limiter starts each key from what Redis last said about
// it: the counts of its windows are entered as if admitted when that
// answer arrived, so none leaves a window before the real entries it
// stands for. A subject that was full stays denied until its entries would
// have left; one with k of L used gets at most L-k more per process. With
// n processes an outage therefore admits at most n·(L-k) beyond the limit
// per window (k as of each process's last answer), and nothing for a
// subject that was full. Keys this process never asked Redis about start
// from nothing (at most L per process).
//
// A timeout makes its server down: on a single server, the engine; on a
// Redis Cluster, the master of the slot (a Ring: the shard). While a
// server is down one call at a time probes it, and the other calls that
// need it use the fail mode at once (with ErrUnavailable) instead of each
// waiting for the timeout; calls whose keys live on other servers are not
// affected: the engine sends one pipeline per server, concurrently, so
// that a server that hangs or fails fails only the calls that need it.
// After an error on a cluster the engine asks go-redis to reload its slot
// map (ClusterClient.ReloadState), so a promoted replica is used as soon as
// the cluster has one.
//
// A script call that fails may have counted its requests anyway: a call
// that timed out may have run, or may run once Redis reads it, and a reply
// the engine cannot read came from a script that ran. (go-redis may
// report every call of a server's pipeline as failed when the context
// expires during its retries, including calls that succeeded.) A request decided by its fail mode
// must not stay counted in Redis, so the engine queues the removal of its
// member (with every suffix) from every key of a failed call, and of every
// failed rollback and give-back (see Engine.GiveBack); the next batch
// whose calls succeed on that server runs the removals before it wakes its
// callers, so the failed call waits no longer. This is best effort: the queue holds at most 4096 removals, each
// retried until its entry has left the key's longest window, and a command
// a hung server reads late may run after its removal; the entry then stays
// until it leaves its windows, erring on the side of denying.
//
// go-redis retries calls after network errors (MaxRetries): when the first
// attempt ran but its reply was lost, the retry finds the request's member
// present, takes it for a collision and counts the request again. Lost
// replies of a call that then succeeds thus count a request twice, never
// zero times, which errs on the side of denying.
package engine
