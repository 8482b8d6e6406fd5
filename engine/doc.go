// Package engine makes exact multi-window sliding-window rate-limit decisions
// in Redis.
//
// An [Engine] decides with a go-redis client: a *redis.Client,
// *redis.ClusterClient, *redis.Ring or any [Client]. Build one per process with
// [New]; the zero Engine is not usable. An Engine is safe for concurrent use,
// and concurrent calls share Redis round trips. [Engine.Close] stops its
// goroutines and leaves the client open.
//
// [Engine.Allow] decides a [Request] and counts it when it is admitted. It
// returns a usable [Decision] whatever fails, with an error saying what did.
// [Engine.Finish] ends an admitted request: it gives it back, settles its cost
// and frees its slots. Peeking at and resetting a subject's windows belong to
// the root package (slidelimit.Limiter.Peek and Reset). The keys, batches and
// script behind this contract are in docs/engine.md.
//
// # Semantics
//
// A window of period W and limit L admits a request at time t iff fewer than L
// requests were admitted in (t-W, t]. A Request holds checks, each a rule (a
// set of windows) applied to one subject. The request is admitted iff every
// window of every check admits it. It is then counted in all of them, otherwise
// in none: a denied request leaves no entry. There is no approximation: no
// buckets, no interpolation between fixed windows.
//
// [Decision.RetryAfter] of a denial is the exact time until the request fits in
// every window, if nothing else is admitted meanwhile. [Decision.Denied] is the
// window with the longest wait. [WindowState.Reset] is the time until a
// window's oldest entry leaves it: exact in a denial and in the windows with
// the fewest remaining, an upper bound (the period) in a shorter window with
// more room than a longer one of its key when the request was not denied.
//
// # Units
//
// Time is the Redis server's TIME in microseconds, read inside the script, so
// application clocks never matter. On a Redis Cluster each key uses its node's
// clock, so windows stay exact when node clocks differ. A clock that goes back
// never hides an entry: a window counts every entry from t-W+1 on, erring on
// the side of denying. [WithClock] replaces TIME, for tests only.
//
// Counts are in cost units. A window admits a request of cost c iff the costs
// admitted in (t-W, t] sum to at most L-c. Used and Remaining count in the same
// units. RetryAfter waits until enough cost has left every window for c to fit.
// A cost above 1 needs a rule with a cost (Rule.Cost), which is a key of
// its own: user and user[bytes] never share a log. A cost above a window's
// limit is never admitted: Allow returns an error matching [ErrInvalid] that
// names the check and window.
//
// # Precedence
//
// Where several settings apply, the most specific one wins:
//   - Cost: Check.Cost, else the rule's constant cost (Rule.Cost "5"), else 1.
//   - Fail mode: Request.Fail, else [WithFailMode], else rules.FailLocal.
//   - Calendar zone: Request.Zone, else UTC, never the process's local zone.
//   - Checks counting in one key (same scope, kind, name and subject) merge:
//     the union of their windows, the smaller limit where periods are equal,
//     the longest Block, and one entry for the request.
//   - Timeout: [WithTimeout] (100 ms), but at least 5 s for a miniredis in
//     this process, which is slow but never down.
//
// # Grains, blocks, calendars and slots
//
// A window with a grain g (rules.Window.Grain) merges the requests of one grain
// into one entry. It never admits more than L in any span of its period, and
// denies at most one grain earlier than an exact window would. Windows without
// a grain stay exact, also in a key with grained windows. Keys shared by groups
// with different grains err by the coarsest grain.
//
// A check with a Block (the rule language's block:) blocks its subject on its
// rule for that long, from the first denial by one of its windows. While the
// block lasts, every Allow of the subject with that check is denied and counted
// nowhere. Attempts never extend it, and a peek never starts one.
// [Decision.Blocked] is set; RetryAfter, and each of the check's windows'
// Reset, are at least the time left, and Remaining is 0. Resetting the subject
// (slidelimit.Limiter.Reset) lifts the block. A denial by an in-flight window
// starts no block.
//
// A calendar window (rules.Window.Calendar: day, ISO week or month) counts what
// was admitted since its period started, at local midnight in the zone. A day
// thus lasts 23 or 25 hours when the clocks change. A denial's RetryAfter and
// the window's Reset are the time to the period's end.
//
// A window with Concurrent set ("N concurrent") bounds how many requests of its
// subject run at once. A request is admitted only if each such window holds
// fewer than N slots, checked atomically with the other windows. It then holds
// one slot per in-flight window until Finish. For such a window Used is the
// slots held (its own included), Remaining the free ones, and Reset zero. Its
// denial has a RetryAfter of one second, unless another window waits longer. A
// fail-open admission holds no slot. Slots are leased and renewed while their
// request runs; [WithLease] says when a dead process's slots free.
//
// # Finishing
//
// [Engine.Finish] ends an admitted request with an [Outcome], in one round trip
// shared with concurrent calls. It is idempotent: a request is given back,
// settled and released at most once. It never touches another request's entries
// or slots. Admitting first and giving back later keeps a limit exact: at most
// L requests whose outcome counts are ever in flight or counted in a window.
// [Engine.FinishAsync] is Finish without the wait, for a caller that has
// answered already. This engine sees its effect at once, other processes within
// 1 ms plus one or two round trips.
//
// Settling to a smaller cost gives the difference back exactly, never below
// zero. Settling to a larger one charges the excess as a debt at the request's
// admission time. A window may then exceed its limit by that excess, and later
// requests wait for it: RetryAfter is never early. Where a settlement cannot be
// exact (grains, a busy key), it errs on the side of denying.
//
// # Cached denials
//
// The engine remembers what Redis last said about up to [WithLocalKeys] keys.
// While a window is known to be full, Allow denies in process (Source "cache"),
// without a Redis call. Such a denial reports what Redis would, with RetryAfter
// and Reset never earlier than Redis's, and later by at most a round trip. It
// never refuses a request Redis would admit. Removals in any process (a Reset,
// a give-back, a rollback) take effect within about a second. Keys with costs,
// grains, slots or distinct values are denied there only by a known block. See
// [WithCachedDenials].
//
// # Failures
//
// When Redis fails, times out ([WithTimeout]) or is considered down, the
// request's fail mode decides, and the error matches [ErrBackend].
// rules.FailOpen admits (Source "fail-open"), and rules.FailClosed denies
// ("fail-closed"). rules.FailLocal asks an in-process limiter with the same
// keys and semantics ("local").
//
// The in-process limiter starts each key from what Redis last said. A subject
// with k of L used gets at most L-k more per process, and a full one none. So n
// processes admit at most n·(L-k) beyond a window's limit during an outage.
// Keys never asked about start from nothing, at most L per process. An
// in-flight window admits up to N at once per process, whatever Redis held.
// Blocks Redis reported still deny, and the in-process limiter starts its own.
//
// A server that does not answer is considered down. Calls that need it take the
// fail mode at once, without touching the network; other servers' calls are
// unaffected. Decisions come from Redis again once it answers a probe. A failed
// call may have counted its requests: the engine removes them once the server
// answers, best effort. A lost reply that go-redis retries counts a request
// twice, never zero times.
//
// Windows are only as durable as Redis keeps them. Eviction, a restart without
// persistence and a failover can lose entries, and the windows then admit more.
// New logs a server that may evict keys ([WithRequireNoEviction] refuses it).
// docs/engine.md says how to configure Redis and the client.
//
// # Keys
//
// Each (scope, rule kind and name, subject) is one sorted set under
// [WithKeyPrefix]. A subject's keys for one rule share a Redis Cluster hash
// tag. No subject byte can change that tag or collide with another subject.
// Subjects over 128 bytes, or all with [WithHashedSubjects], are stored hashed.
// Keys name no limit: a changed limit applies at once to the entries recorded.
// Keys expire once every entry has left every window. A group that starts using
// a live key with a longer window than the key has seen may admit more than its
// limit during that first window.
package engine
