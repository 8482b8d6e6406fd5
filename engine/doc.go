// Package engine makes exact multi-window sliding-window rate-limit
// decisions in Redis.
//
// An [Engine] is built once per process with [New] over a go-redis client
// (a *redis.Client, *redis.ClusterClient, *redis.Ring or any [Client]) and
// is safe for concurrent use. [Engine.Allow] decides a [Request] and counts
// it; [Engine.Finish] ends an admitted request: it gives it back, settles
// its cost to what it really consumed, and frees the slots of its
// in-flight windows. Allow returns a usable [Decision] whatever fails. Peeking at and resetting a
// subject's windows are the root package's (slidelimit.Limiter.Peek and
// Reset), which knows the scopes and limiters registered.
//
// # A request's life
//
// An admitted Decision knows what it took: the keys it was counted in, its
// member there, the costs it was charged and the slots it holds. So one
// call ends a request once its work is done, whatever transport served
// it: [Engine.Finish] with an [Outcome] gives the request back
// (Outcome.GiveBack, for count:), settles its costs (Outcome.Actual) and
// always releases its slots, in one finish op of the script, which joins
// the engine's batches like an admission (one Redis round trip, shared
// with concurrent admissions and finishes; on a cluster one script call
// per hash slot touched, and a subject's keys share one). Finish is
// idempotent. An admission and its Finish thus take two round trips when alone,
// and under load share them: 64 downloads at once (rate, in-flight and
// byte windows, settled) took 0.12 to 0.19 round trips each on one server
// and about 0.3 to 0.5 on a 3-master cluster (TestRoundTripsDownload).
//
// [Engine.FinishAsync] is Finish without the wait, for a caller that has
// answered already (the middleware after its handler): it queues the
// finish op, which rides the engine's next script call to the key's
// server, ahead of that call's admissions, or is sent on its own within
// 1 ms (on a busy engine, with the batch led next). An Allow
// of the same engine made after FinishAsync returns sees the
// finish applied; other processes see it within 1 ms and one or two
// round trips. [Engine.Close] sends what is queued.
// A crash loses it: the request's slots free when their lease ends, and a
// request not settled or given back stays charged its estimate until it
// leaves its windows (erring on the side of denying). Its errors are
// logged, throttled, and counted (the benchmarks read the count).
//
// # Semantics
//
// A window of period W and limit L admits a request at time t iff fewer
// than L requests were admitted in (t-W, t]. A Request holds checks, each a
// limiter (a set of windows) applied to one subject; it is admitted iff
// every window of every check admits it, and then it is counted in all of
// them, otherwise in none: a denied request leaves no entry anywhere. There
// is no approximation: no buckets, no interpolation between fixed windows.
// Checks of one request that count in the same key (same scope, kind, name
// and subject) are merged: the union of their windows, the smaller limit
// where periods are equal, and one entry for the request.
//
// [Decision.RetryAfter] of a denial is the exact time until the request
// fits in every window if nothing else is admitted meanwhile, and
// [Decision.Denied] the window with the longest wait. [WindowState.Reset]
// is the time until a window's oldest entry leaves it (see its doc for
// which windows an admission reads).
//
// # Costs and grains
//
// A check counts its cost: Check.Cost, or when that is 0 the constant cost
// of its limiter (Limiter.Cost "5"), or 1. A window of limit L then admits
// a request of cost c at t iff the costs admitted in (t-W, t] sum to at
// most L-c; Used and Remaining are in cost units, and RetryAfter is the
// time until enough cost has left every window for c to fit. A cost above
// a window's limit could never be admitted: Allow returns a [requestError]
// naming the check and window instead. A cost above 1 needs a limiter with
// a cost (Limiter.Cost), because such a limiter is its own key: user and
// user[bytes] never share a log.
//
// A window with a grain g (rules.Window.Grain) lets the engine merge the
// requests of one grain into one entry, which leaves the window with the
// latest of them. It never admits more than L in any span of its period
// and denies at most one grain earlier than an exact window would. Windows
// without a grain stay exact, also in a key with grained windows. A key
// then holds about the entries of its exact windows plus W/g per grained
// window, whatever the limits: in a measurement, the group
// user:200/10s,5000/h~2m,20000/d~30m held 82 members (4,168 bytes) after
// 20,000 admissions spread over a day, against 2.4 MB for the exact group.
// Keys shared by groups with different grains err by the coarsest one.
//
// # Blocks
//
// A check with a Block (Check.Block, the rule language's block:) blocks
// its subject on its limiter for that long from the first time one of the
// limiter's windows denies it. The block is a key beside the limiter's key
// (the key and ":block", in its Redis Cluster hash tag, so in its slot),
// holding the block's end and expiring with it; the script reads it before
// admitting and sets it in the same atomic call as the denial that starts
// it (lua/multi_window.lua, Blocks). While it lasts, every Allow of the
// subject with that check is denied, counts in no window of any check, and
// leaves the block as it is, so attempts never extend it; a Peek reports
// it but never starts one. [Decision.Blocked] is set, the check's windows
// report Remaining 0 and a Reset of at least the time left, and
// RetryAfter is at least the time left (more when a window itself waits
// longer). Reset deletes the block key with the limiter's key. A block in
// this process's cache denies without a Redis call, like a full window
// (see Cached denials); a denial that would start a block always goes to
// Redis, so that the block is set there. The FailLocal fallback knows the
// blocks Redis reported and starts its own. An in-flight window's denial
// starts no block: a slot frees whenever a running request ends, and a
// block punishes going over a rate.
//
// # Settlement
//
// A request is admitted against its cost (Check.Cost), usually an
// estimate made before the handler runs. [Engine.Finish] with
// Outcome.Actual changes it to the actual cost afterwards, in limiters with a cost: less gives the
// difference back, exactly, never below zero; more is a debt charged at
// the request's own admission time (the window may then exceed its limit
// by that excess, and later requests wait for it to leave). A weighted
// key's entries carry running totals, so the request's entry and every
// later one are rewritten (a finish op, lua/multi_window.lua):
// O(entries after it), at most 64, beyond which the change errs on the
// side of denying. The request's entry is mostly still its key's newest,
// and its rewrite then takes two commands (ZPOPMAX, ZADD). With
// grains, a request merged into the next entry is settled in that entry;
// the middleware's WithSettle and ReportCost settle after the handler.
//
// # In-flight windows
//
// A window with Concurrent set (rule text "N concurrent") bounds how many
// requests of its subject run at once. A request is admitted only if every
// window has room and each of its in-flight windows has fewer than N slots
// held, in the same atomic call as the other windows; it then holds one
// slot per in-flight window until [Engine.Finish] with its Decision.
// Finish removes the request's own member only: it is
// idempotent and cannot free another request's slot. For such a window,
// WindowState.Used is the slots held (including the request's own when it
// was admitted), Remaining the free ones, and Reset is zero. A denial by
// it has a RetryAfter of one second: a slot frees whenever a running
// request ends, so no wait is exact, and one second is the shortest a
// Retry-After header can say (a rate window of the same request that waits
// longer sets the RetryAfter instead).
//
// A slot has a lease ([WithLease], 30 s by default). The engine renews the
// slots of every request it admitted every lease/3, in one pipelined call
// per server (per master on a cluster), in one goroutine that Close stops;
// a process that dies stops renewing, and its slots free at most one lease
// after their last renewal. A renewal that finds a slot gone (a Reset, a
// flush) leaves its request running, logs once per renewal with the count
// and calls the [WithSlotLost] hook: that request no longer occupies a
// slot, so one more may be admitted while it runs. The slots on a server
// that is down (see Failures) are not renewed until it answers again, and
// a failed renewal logs at most one line per 10 s: an outage longer than
// two thirds of a lease loses them, which the first renewal after it
// reports.
//
// A fail-open admission holds no slot (nothing was written), and Finish
// of it does nothing.
//
// In-flight windows make no cached denials (a slot frees at any moment, in
// any process): a request with one asks Redis, unless a block known to the
// cache denies it (a block denies whatever the slots say, and only time or
// a Reset, which invalidates, ends it); such a cached denial reports its
// in-flight windows with no slot used, which the cache never knows. The
// FailLocal fallback counts slots in process, released by Finish or after
// one lease (it does not renew): during an outage each of n processes
// admits up to N at once, up to n·N together, without regard to those held
// in Redis when it began.
//
// # Time
//
// Time is the Redis server's TIME in microseconds, read inside the script,
// so application clocks never matter ([WithClock], for tests, passes the
// time in the script's arguments instead). On a Redis Cluster each key
// lives on one node and uses that node's clock, so every window stays
// exact even when node clocks differ. A clock that goes back (an NTP step,
// a failover to a replica whose clock is behind) never hides an entry: a
// window counts every entry from t-W+1 on, including those scored after t,
// which errs on the side of denying until the clock has caught up.
//
// # Calendar windows
//
// A window with rules.Window.Calendar set (day, ISO week or month) counts
// everything admitted since the start of the current period in
// Request.Zone (nil: UTC), local midnight by the zone's wall clock, so a
// day lasts 23 or 25 hours when the clocks change. It is checked with the
// request's other windows in the same script call, all or nothing, and
// stored as one counter per subject and period in a key of its own: the
// limiter's key followed by ":cal:" and the unit (same hash slot), a hash
// whose field named by the period's start holds its count, and which
// expires after the period ends, relative to the script's time. The script may decide at
// Redis's TIME, which the engine does not know beforehand, so the engine
// sends the boundaries of the periods around its own clock and the script
// counts in the one that holds its time. A denial's RetryAfter, and the
// window's Reset, are the time to the period's end. Finish gives back or
// settles in the counter of the request's own period, never below zero (a
// settled request is not given back as well); a rollback on a cluster
// does the same; the undo of a failed script call leaves the counter,
// erring on the side of denying. A counter keeps no member to remove, so
// each such change leaves a record of the request in the hash until the
// period ends: a change retried after a timeout, though Redis had run it,
// changes the count once. Reset deletes the counters of the
// limiter's calendar windows. See lua/multi_window.lua, Calendars.
//
// # Distinct values
//
// A check with Check.Distinct set counts that value (a URL path, say) in
// its count key instead of the request: the key holds the value's member,
// scored by the time it last counted, and a window that holds it admits
// the request without counting again (its WindowState.Used does not grow).
// A value counts again once it is older than the check's shortest window.
// The limiter must have no cost and no grain. Distinct requests make no
// cached denials (a full window still admits the values it holds). A
// rollback restores the value's member; a give-back leaves it counted. See
// lua/multi_window.lua, Distinct.
//
// # Storage
//
// Each (scope, limiter kind and name, subject) is one sorted set, keyed
//
//	prefix{scope|kind|subject}   or, for named kinds,   prefix{scope|kind:name|subject}
//
// for example slidelimit:{GET%20/files/%7Bid%7D|user|42}; a limiter with a
// cost or a grained window adds a fourth segment, the cost, after the hash
// tag (slidelimit:{GET%20/files/%7Bid%7D|user|42}|bytes, "1" for a grained
// count limiter). Scope, kind, name, subject and cost are percent-encoded
// ('%', the separators '|' and ':', the braces, '#', space and control
// bytes), so distinct triples never share a key and no client-supplied byte
// can end or open the braces, which make the whole triple the Redis Cluster
// hash tag: every key of one subject and limiter kind (its count key, its
// cost keys, its slot and block keys) lives in one cluster slot, and one
// script call admits or finishes a request's checks of that subject.
// A subject longer than 128 bytes (or every subject, with
// [WithHashSubjects]) is stored as '#' and the unpadded base64url SHA-256
// (HMAC-SHA-256 with a secret) of its bytes. A member is one admitted
// request, a snowflake id (unique per process node, see [WithNode]); the
// members, markers and scores are specified in lua/multi_window.lua. The
// slots of an in-flight window live in the subject's count key name
// followed by ":slots" (slidelimit:{GET%20/reports|user|42}:slots, the
// same hash tag): a sorted set of running requests' members scored by
// their lease deadlines (expired ones are removed once per lease, see
// lua/multi_window.lua), which expires at most two leases after its last
// admission or renewal.
//
// Keys name no limit, so a check may carry different limits from one
// request to the next (limit functions, rule overrides in package
// slidelimit): a new limit applies at once to the entries recorded, a
// lower one denying until enough of them leave, a higher one admitting at
// once. Cached denials match a window by its period and limit, so a
// changed limit is asked of Redis.
//
// Keys expire on their own once every entry has left every window; a busy
// key keeps stale entries for at most an eighth of its longest window, a
// quiet one up to one window. Keys can be shared by groups whose longest
// windows differ (handlers sharing a scope): entries live as long as the
// longest window any group has used on the key. A group that starts using
// a live key with a longer window than the key has seen (a new handler
// sharing the scope, a deployment that lengthens a window) sees at first
// only the entries the others kept, and may admit more than its limit
// during its first window.
//
// # Round trips
//
// Concurrent Allow and Peek calls are batched: a caller that finds fewer
// than two batches in flight sends its own request at once (no added
// latency when alone); otherwise it queues, and the next batch carries
// every queued request (up to 64). On a single Redis server a batch is one
// script call, which decides its requests one after another, each
// atomically; requests of a batch on the same key (a hot key under load)
// read it once, the later ones deriving their counts from the earlier
// ones' (with the same results as reading them).
//
// The script is loaded as a Redis Function (FUNCTION LOAD of
// lua.MultiWindowLibrary, on every master of a cluster) before the
// engine's first batch, and decisions call it with FCALL: EVALSHA would
// run the whole script each call, re-creating its helpers, which costs
// a decision about 3.5 µs of Redis CPU. The library, named slidelimit_
// and the script's SHA1, stays on the server: each version of slidelimit
// loads its own beside the others (FUNCTION LIST shows them, FUNCTION
// DELETE removes one a running version no longer uses). A server that
// lacks it (FUNCTION FLUSH, a restart without persistence, a promoted
// replica) answers "Function not found": that call goes again as EVALSHA
// and the library is loaded again. After NOSCRIPT (SCRIPT FLUSH, a
// restart, a promoted replica) the engine resends the script's source.
// Callers never see either error. A server that cannot run functions
// (Redis before 7, miniredis, an ACL user without FUNCTION or FCALL) gets
// EVALSHA for the engine's life; one out of memory refuses a whole FCALL
// before it runs, where EVALSHA still answers a denial or a peek, so such
// a call goes again as EVALSHA.
//
// On a Redis Cluster (a *redis.ClusterClient) keys of one request usually
// live in different slots and one script may only touch one slot, so a
// request is reserved with one script call per slot (one pipeline per
// master, sent concurrently): if any slot denies or fails, the request is
// removed from every slot that admitted before Allow returns. So it is
// never over-admitted and a denied request leaves no entry; while a
// reservation is rolled back a concurrent request may see one entry too
// many, erring on the side of denying. A Ring, or a client the engine
// cannot see through, gets one call per key with the same rollback.
//
// # Cached denials
//
// The engine remembers what Redis last said about each key it asked about
// (at most [WithLocalKeys] keys). A later Allow whose every key is known,
// with a window still full and every count still exact, is denied
// in-process without a Redis call (Source "cache"), reporting what a
// Redis denial at that moment would: the same Used, Remaining and denying
// window, with RetryAfter and Reset never earlier than Redis's (later by at
// most the round trip). The cache never denies a request Redis would
// admit: entries leave a full window only with time, except when a process
// removes them (Reset, a give-back, a rollback), and every removal is
// published on the channel prefix+"invalidate", to which every engine
// subscribes. An engine that has not heard from its subscription for 0.8 s
// makes no cached denial, nor from an answer older than 1 s, so a key
// deleted behind the engines' backs is asked again within a second. Peek
// always asks Redis. See [WithCachedDenials].
//
// # Failures
//
// Each Redis call has a timeout ([WithTimeout]). When Redis fails or times
// out, the request's fail mode (or the engine's, [WithFailMode]) decides:
// rules.FailOpen admits (Source "fail-open"), rules.FailClosed denies
// ("fail-closed"), rules.FailLocal asks an in-process limiter with the
// same keys and semantics ("local"); the error is returned with the
// decision in every case, matching [ErrBackend].
//
// The in-process limiter starts each key from what Redis last said about
// it. A subject that was full stays denied until its entries would have
// left; one with k of L used gets at most L-k more per process. With n
// processes an outage therefore admits at most n·(L-k) beyond the limit
// per window (k as of each process's last answer), and nothing for a
// subject that was full. Keys this process never asked Redis about start
// from nothing (at most L per process). Keys counting distinct values
// ([Check.Distinct]) start from the number of values Redis held; the
// limiter counts requests there, so a window with k of L values admits at
// most L-k requests per process, whatever their values.
//
// An embedded miniredis, running in this process, is not down when it is
// slow: New recognizes it and gives its calls a timeout of at least 5 s.
//
// A server that does not answer (a timeout, a refused or broken
// connection) is considered down: the engine itself on a single server, a
// cluster master, a Ring shard. While it is down, every call that needs it
// uses the fail mode at once, without touching the network (its error
// says "redis considered down, not asked"); calls whose keys live on other servers are not
// affected. One goroutine per down server sends it PING in the
// background, at once, then after 50 ms, doubling the pause up to 1 s,
// and decisions come from Redis again as soon as a PING is answered. Only
// the calls whose batch meets the failure wait, for at most the timeout
// (go-redis retries a refused dial until then unless the client has
// DialerRetries 1 and MaxRetries -1). The
// engine logs one warning when a server goes down, then at most one every
// 10 s with the number of fail-mode decisions since the last line, and
// one line when it answers again; hooks see every decision.
//
// Windows are only as durable as Redis keeps them. New reads INFO memory
// and INFO stats of every server it uses (every master of a cluster), and
// repeats it every minute in the background: a server with
// maxmemory set and any policy but noeviction can evict windows (every
// engine key has a TTL, so volatile-* policies evict them too), which New
// logs once, or refuses with [WithRequireNoEviction]; evicted keys are
// logged and reported to [WithEvictionHook]. With noeviction and memory
// full, the script's OOM error reply sends decisions to the fail mode,
// logged at most once per 10 s per server.
//
// A script call that fails may have counted its requests anyway (it may
// have run, or run once Redis reads it). A request decided by its fail
// mode must not stay counted, so the engine removes it from the failed
// call's keys once that server answers again. This is best effort: a
// command a hung server reads late may run after its removal, and the entry
// then stays until it leaves its windows, erring on the side of denying.
// Likewise go-redis retries a call whose reply was lost: the retry finds
// the request's member present and counts it again, so a lost reply counts
// a request twice, never zero times.
//
// Redis replicates asynchronously: a failover can lose the admissions its
// master had not yet sent to the promoted replica (none in our
// measurements of a master killed under load, where a failover took 2 to
// 3 s), and a window then holds fewer entries than were admitted. The
// Redis Cluster section of docs/engine.md says how to configure the client so that
// the engine follows a failover as soon as the cluster has recovered (back
// on Redis about 0.1 s after the cluster reported cluster_state:ok again,
// in those measurements). Its Redis configuration section says what a
// restart without persistence forgets (every window) and which memory
// policies let Redis evict windows (every one but noeviction, when
// maxmemory is set).
//
// # Settling in detail
//
// The request was admitted against its estimate (Check.Cost), so no window
// held more than its limit at admission. Settling to less gives the
// difference back, exactly: the window then holds the actual cost, never
// less than zero and never a credit. Settling to more charges the excess at
// the request's own admission time, as a debt: later requests wait longer,
// and a window may exceed its limit by at most that excess. Callers that
// want to cap the debt, or refuse it, pass min(actual, estimate+cap); the
// middleware does (see its WithSettle). Retry-After stays never early:
// every later decision reads the settled entries.
//
// Only limiters with a cost settle: a check of a limiter without one (it
// counts requests) must have actual -1 or its cost, else Finish returns
// an error matching ErrInvalid and changes nothing; so must checks sharing
// a key with different actual costs.
//
// A request is settled at most once: its entry is renamed, so that a second
// settlement, or a give-back after it, finds nothing (settle to 0 to give a
// request back in full). A request already given back is not settled. A
// Decision that counted nothing (a denial, a peek, a fail-open or
// fail-closed decision) has nothing to settle. A decision of the fallback
// limiter (Source "local") is settled there.
//
// With grains, a request whose entry was merged into the next one (see
// the package documentation) is settled in that entry, which carries its
// cost: the first entry scored at or after d.Time in the same grain (the
// key's coarsest). Such an entry stands for other requests too, so it is
// not marked settled: settle a request once. On a cluster whose node
// clocks differ, d.Time (the latest of the nodes' times) may pick a later
// entry of the same grain, so the change takes effect up to one grain late.
// When no such entry is found a refund is not made and a debt is charged
// to the key's newest entry; both err on the side of denying. A key with
// more than 64 entries after the request's is not rewritten: a refund is
// not made and a debt is charged to its newest entry (see Weighted changes
// in lua/multi_window.lua).
//
// When Redis fails, or is considered down, the settlement is queued like
// the undo of a failed call (best effort, retried before later script
// calls) and the error matches ErrBackend (see Finishing).
//
// # Finishing asynchronously
//
// What this process sees is updated before FinishAsync returns: the
// request's slots are no longer renewed, its keys are forgotten by the
// cache of denials, and an Allow this engine makes after
// FinishAsync returns sees the finish applied in Redis. The queued op
// rides the next script call to its key's server, ahead of that call's
// admissions (the same script call on a single server; the same pipeline,
// in order, per server elsewhere), and a batch that starts while an
// earlier batch carrying queued ops of its keys is still on its way waits
// for that batch's answer before it is sent. Without other traffic the op
// is sent on its own within 1 ms. Other processes thus see the finish
// at most 1 ms plus one round trip after FinishAsync, plus one more
// round trip when the engine's batch slots are all in flight then, and
// plus the delay of a retry when Redis fails (below).
//
// Close sends what is queued and waits for it. A process that crashes
// before then loses the queued work: the request's slots free when their
// lease runs out (WithLease), as they are no longer renewed, and a request
// not settled stays charged its estimate, and one not given back stays
// counted, until it leaves its windows: both err on the side of denying.
//
// FinishAsync has no caller to report to. Its errors go to the engine's
// logger, at most one line per warnEvery (10 s) with the number of lines
// held back, and are counted (finishAsyncFailures): a Decision or Outcome
// that Finish would refuse (an error matching ErrInvalid; nothing is changed), a call
// after Close, and Redis failing, in which case the work is queued like
// the undo of a failed call (see Finish). A decision of the local fallback
// limiter (Source "local") is finished in-process before FinishAsync returns,
// as Finish does. It is safe for concurrent use.
//
// # Giving back
//
// Admitting then giving back keeps a limit exact where checking after the
// fact would not: while its outcome is unknown, the request holds its place
// in every window, so at most Limit requests whose outcome counts are ever
// in flight or recorded in a window.
//
// Finish with Outcome.GiveBack removes the request's own member, a unique
// id, so it never removes another request's entry; the request's slots are
// released too.
//
// # Finishing
//
// Finish is idempotent: what an earlier Finish of d (or a copy of d) did is
// not done again, and a request is given back, released and settled at most
// once. It does nothing and returns nil for a Decision that counted nothing:
// a denial, a peek, a fail-open or fail-closed decision, or an Allow without
// windows. A decision of the local fallback limiter (Source "local") is finished
// there. o.Actual with the wrong length, or settling a limiter without a
// cost to another cost, returns an error matching ErrInvalid and changes nothing.
//
// When Redis fails, or is considered down, the work is queued like the
// undo of a failed call (best effort, retried before later script calls)
// and the error matches ErrBackend; Finish waits for at most one timeout. A
// slot that could not be released frees at the latest one lease later, as
// it is no longer renewed. After Close, Finish returns ErrClosed. It is
// safe for concurrent use.
//
// Finish removes only the request's own slot, its unique member, so a
// second Finish frees nothing and none frees another request's slot.
//
// # Starting
//
// New returns an Engine deciding with client. It reads INFO memory and
// stats of every server the engine uses (every master of a cluster),
// waiting at most the timeout or a second, and logs a warning when a
// server's maxmemory-policy can evict the engine's keys (see
// WithRequireNoEviction); it repeats this check every
// minute in a goroutine of its own. With cached denials on
// (the default, see WithCachedDenials) it subscribes to the invalidation
// channel and waits for the subscription (at most a second, or the
// timeout if longer; at once when Redis refuses connections). When the
// client's server listens in this process, it asks INFO server on a
// connection of its own (waiting at most a second): an embedded miniredis cannot be
// down, so calls to it wait up to 5 s (or the timeout if longer) before
// the fail mode decides, whatever the timeout. It sends no other command:
// the script is loaded by the first call that needs it. The
// Engine does not own client; Close leaves it open. New fails with an
// error matching ErrInvalid when client is nil (also a typed nil such as
// (*redis.Client)(nil)) or an option is invalid.
//
// # Leases
//
// While a request runs, the engine renews the slots it holds every
// lease/3 (WithLease), all of them in one pipelined call per server, so a
// request may run far longer than its lease. A process that dies stops
// renewing: its slots free at most one lease after their last renewal. A
// shorter lease frees a crashed process's slots sooner at the cost of more
// renewals. Keep the lease well above three timeouts (WithTimeout): a
// renewal that meets a server that has just stopped answering waits up to
// a timeout, and the renewals of the other servers' slots, in the same
// pipeline, wait with it. Engines sharing a Redis may use different
// leases: each slot keeps its own deadline.
//
// # Cached denials in detail
//
// A denial from the cache is never wrong in the admitting direction, and
// it is never made for a request Redis would admit: deadlines are taken
// from the moment the answer's call was sent, so they end no later than in
// Redis, and a Reset, give-back or rollback in any process is published on
// a Redis channel (the prefix followed by "invalidate") that every
// engine with cached denials subscribes to, and honoured within about a
// second (as soon as it is delivered; an engine that has not heard from
// its subscription for 0.8 s makes no cached denial). The subscription is
// one extra connection and one goroutine per engine, stopped by Close.
// Clients that cannot subscribe (not a *redis.Client, *redis.ClusterClient
// or *redis.Ring) get no cached denials.
//
// What Redis last said is kept either way: the FailLocal fallback starts
// from it.
package engine
