// Package middleware enforces a rule group on net/http handlers: New turns a
// rules.Group and a Decider (normally *engine.Engine) into a
// func(http.Handler) http.Handler that makes one atomic decision per request
// across every window of every rule that applies to the caller.
//
// # Identity and roles
//
// The caller's user id and roles come only from the request context, where
// the service's authentication put them with role.NewContext; no client
// header is ever read for them. An exempt caller is passed to the next
// handler without any call to the Decider.
//
// # Subjects
//
// Each rule counts the requests of one subject:
//
//   - ip: the client address. It is the peer address (RemoteAddr) unless
//     trusted proxies are configured (WithTrustedProxies) and the peer is one
//     of them; then the proxy header (WithProxyHeader: X-Forwarded-For, or
//     the for= parameters of RFC 7239 Forwarded) is read from the right and
//     the first address that is not a trusted proxy is the client. If the
//     header runs out, or holds something that is not an address, the
//     nearest trusted hop is used. A proxy header from an untrusted peer is
//     never believed. IPv6 clients are grouped by network
//     (a /64 unless WithIPv6Prefix says otherwise) and IPv4-mapped IPv6
//     addresses count as IPv4; see CanonicalizeIP.
//   - user: the identity's user id. A request without identity or user id,
//     or by a role the policy counts by IP (role.Policy.ByIP), is counted by
//     client IP instead.
//   - header(Name): the value of the request header; param(name): the path
//     value r.PathValue(name); key(name): the result of the function
//     registered with WithKeyFunc. An empty value — a missing header, say —
//     is counted by client IP: an explicit "empty" subject would let every
//     client without the header exhaust one shared window for all of them,
//     and sending no header must not escape the limit either.
//   - global: one subject for every request of the scope.
//
// Subjects carry a prefix naming their origin ("ip:", "user:", "header:",
// ...), so an IP-derived subject can never be counted together with a user
// id or header value that happens to spell the same text.
//
// # Costs
//
// A rule with a cost counts more than one per request (see package
// rules): user[bytes]:2Gi/d counts, per user, what the function registered
// with WithCostFunc("bytes", fn) returns, and ip[5]:100/min counts 5 per
// request. Before calling the Decider the middleware calls each cost
// function the applicable rules name, once per request whatever the
// number of rules naming it, and passes the cost in engine.Check.Cost (0
// for rules without a cost, which count 1). A cost function that returns
// an error, or a cost below 1, makes the middleware answer without deciding
// or counting: 400 when the error wraps ErrBadRequest (the request itself
// cannot be costed, such as a malformed Range header), else 500, with a
// problem body that only names the status. The error goes to the logger
// (naming the function and rule) and to hooks, never to the client. In shadow mode the request is served, uncounted.
//
// # Limit functions
//
// A window whose limit names a limit function, as in key(tenant):$quota/min
// (see package rules), has the limit that the function registered with
// WithLimitFunc("quota", fn) returns for the request: the figure of the
// calling tenant's plan, say. fn gets the request's context, where
// authentication put the identity. The middleware calls each limit function the
// applicable rules name once per request, after the cost functions,
// and passes the windows with their limits in the engine.Check. A function
// that returns an error, a limit below 1 or above the window's cap
// (100,000 for an exact window of a rule without a cost, 2^50
// otherwise) is answered as a failing cost function is: 400 when the
// error wraps ErrBadRequest, else 500, nothing counted, the error logged
// and passed to hooks, never to the client. The RateLimit-Policy field
// advertises the resolved limits. It is rendered per request only for
// plans with a limit function; other plans keep their precomputed field. Events and denials carry the
// resolved window (Limit set, LimitFunc still naming the function).
//
// # Scope
//
// Windows belong to a scope, in order of precedence: the group's scope:
// statement, WithScope, WithScopeFunc, and the pattern the router matched
// (http.Request.Pattern, as set by http.ServeMux), so that /files/1 and
// /files/2 served by "GET /files/{id}" share their windows. The raw URL path
// is never used. A request for which none of them gives a scope — the
// middleware wrapping a whole ServeMux rather than one of its handlers, for
// instance — is answered with 500 and the missing scope is logged.
//
// # Responses
//
// A limited response carries the RateLimit-Policy and RateLimit fields of
// draft-ietf-httpapi-ratelimit-headers-11 (Structured Field Lists). The
// policy field has one item per window of the rules that applied, named
// by its rule and period, with q the limit and w the period in seconds:
//
//	RateLimit-Policy: "ip-1s";q=5;w=1, "ip-1min";q=100;w=60, "user-1h";q=1000;w=3600
//
// The RateLimit field names the most constrained window — the denying one,
// else the one with the fewest remaining requests, ties going to the longer
// effective window (per quota unit; see below) — with r the remaining
// requests and t its effective window:
//
//	RateLimit: "ip-1s";r=0;t=1
//
// Draft-11 defines t as the effective window: the seconds within which the
// client can use no more than the available quota r. (Draft-10 called it the
// seconds until the quota resets, which a sliding window never does all at
// once.) In a sliding log nothing is freed before the oldest counted request
// leaves the window, the engine's WindowState.Reset from now; until then r
// is all the client may use, and right after it one more request fits. So t
// is Reset, or the whole period for a window that holds nothing (a window
// that did not count a denied request). Far from its limit, at most an
// eighth full, a window's Reset is its period, an upper bound (see
// engine.WindowState): a client told r and t is then never early either,
// as r is at least seven eighths of q. Because the draft allows only whole
// seconds, t is rounded up and at least 1: a client that uses r and then
// waits t is never early, and at worst waits less than a second too long.
// Likewise w is the period rounded up to at least 1 (5 per 500ms is
// advertised as q=5;w=1, which a client can follow without being denied).
//
// A denied request gets 429 with Retry-After: the engine's wait in seconds,
// rounded up and at least 1, never earlier than the moment the request would
// fit. The draft says Retry-After should not point earlier than the end of
// the effective window, so t is capped at Retry-After; the denying window's
// own effective window ends no later anyway (its oldest entry must leave
// before the request fits), and a shorter t stays true. The body is
// application/problem+json (RFC 9457) of the draft's quota-exceeded type
// with a violated-policies member; see WriteProblem and WithDeniedHandler.
// WithLegacyHeaders adds X-RateLimit-Limit, -Remaining and -Reset.
//
// Quota units. The draft's q and r are counted in quota units, requests
// unless the qu parameter says otherwise. Windows of a rule whose cost
// function is named bytes are advertised with qu="content-bytes", the
// draft's unit for content bytes:
//
//	RateLimit-Policy: "user-1min";q=10;w=60, "user[bytes]-1d";q=2147483648;qu="content-bytes";w=86400
//
// A window of a constant cost is advertised in requests: q is the limit
// divided by the cost and r the remaining units divided by it, the numbers
// of requests that fit (ip[5]:100/min is q=20). Windows of other cost
// functions are not advertised: the draft only allows units of its
// registry (requests, content-bytes, concurrent-requests), and an item
// without qu would claim requests. Their denials still carry Retry-After
// and name the policy in the problem body. Remaining requests and remaining
// bytes cannot be compared, so RateLimit names the most constrained window
// of each advertised unit, requests first; a denial names only the denying
// window.
//
// In-flight windows (N concurrent, see package rules) are advertised in
// the draft's concurrent-requests unit, with q the slots and no w (the
// quota is of requests at once, not per time); RateLimit reports the free
// slots as r, without t (a slot frees whenever a running request ends):
//
//	RateLimit-Policy: "user-1h";q=20;w=3600, "user-concurrent";q=1;qu="concurrent-requests"
//	RateLimit: "user-1h";r=19;t=3600, "user-concurrent";r=0
//
// A request refused because its subject already runs N requests gets 429,
// a problem body naming the in-flight policy, and Retry-After: 1. No wait
// is exact (a running request may end at any moment), and one second, the
// shortest wait Retry-After can say, lets a client retry soon without
// hammering; a lease deadline would only be a bound for crashed holders.
// When a rate window of the request waits longer, its wait is sent.
//
// Nested middlewares, such as a service-wide limit in front of a route's
// own, each add their members to RateLimit-Policy and RateLimit (a
// Structured Field List may span several field lines); give their
// rules different IDs or periods, or their policy names collide.
//
// When Redis fails, the Decision's source decides: fail-open and local
// decisions are served like any other, and fail-closed answers 503 with
// Retry-After and a body of the draft's temporary-reduced-capacity type. A request the engine cannot evaluate (an error matching
// engine.ErrInvalid) is a server error, answered with 500 rather than a
// misleading 429. Errors go to the WithLogger logger, never to the client.
// A request whose own cost is above a window's limit (a 3 GiB download
// under a 1 GiB daily quota) could never be admitted: it is answered 429
// without Retry-After (Denial.Never), without asking the engine.
//
// A group in shadow mode (mode:shadow) is counted but never denies, and its
// responses carry no rate-limit fields, so that clients cannot tell; would-be
// denials are logged at Info and reported to hooks with Allowed false.
//
// # Counting by outcome
//
// For a group with a count: statement (see package rules), the middleware
// records the status the handler answers with, behind a ResponseWriter
// that keeps http.Flusher, http.Hijacker, io.ReaderFrom and
// http.ResponseController working, and gives the admitted request back
// (through the Decider's FinishAsync, see After the handler) when the status
// is not listed. A handler that panics or hijacks the connection stays counted:
// its outcome is unknown. The rate-limit fields sent before the handler
// runs describe the windows with the request counted. Groups without
// count: (or a settled rule, see Settlement) are served without the
// wrapper.
//
// # Settlement
//
// WithSettle(name, s) makes the rules whose cost function is name settle
// after the handler (through the Decider's FinishAsync): the request
// is admitted against the cost function's estimate, then counts its actual
// cost instead, the one the handler reported with ReportCost(ctx, name, n)
// or, with s.Written, the bytes of body written (an aborted download
// counts what was sent). Less than the estimate is given back; more is a
// debt charged at the request's admission time, capped by s.MaxDebt (-1
// refuses it). A request given back by count:, or whose handler panicked
// or hijacked the connection, keeps its estimate. Only requests of groups
// with a settled rule get the wrapper and a context to report to.
// contrib/grpclimit takes WithSettle for gRPC calls, whose handlers report
// with the same ReportCost.
//
// # Blocks
//
// A group's block: statement (see package rules) reaches the engine as
// engine.Check.Block on every check. A blocked request is denied like any
// other, with RateLimit r=0 and t, and Retry-After, the time the block has
// left (or longer when a window waits longer); Event.Decision.Blocked says
// so. Exempt roles never reach the engine, so they are never blocked.
//
// # After the handler
//
// However the handler ends (normally, by panic, by hijack, or after the
// client hung up), the request is finished with one
// engine.Engine.FinishAsync: given back (count:), settled (WithSettle) and
// its slots released by one finish op, which the engine queues and sends
// with its next script call (or alone within 1 ms), so the
// response does not wait for a Redis round trip after its handler. The
// engine logs (throttled) and counts a finish that fails, retries it, and
// a slot frees at the latest when its lease ends; a crash loses queued
// finishes (see engine.Engine.FinishAsync). This is the one finish seam:
// a group with count:, an in-flight window or WithSettle needs a Decider
// that also has engine.Engine's FinishAsync method, and New fails with a
// *ConfigError otherwise; a Decider that wants the response to wait for
// the finish implements FinishAsync with engine.Engine.Finish. A request's life —
// resolve the caller, price, decide, respond, run, finish — is written
// once, as an Admission in the module's internal lifecycle package; the
// middleware only translates a request into its subjects, costs and
// limits, the Admission's verdict into fields and a status, and the
// handler's end into an outcome. The gRPC interceptors of
// contrib/grpclimit run the same Admission through package transport.
//
// # In-flight requests
//
// A request admitted by a group with an in-flight window holds one slot
// per such rule while its handler runs. A step after the handler
// releases them (the Decider's FinishAsync) however the handler ends:
// normally, by panic, by hijack, or after the client hung up. The engine
// renews the slots of long requests (engine.WithLease). New fails with a
// *ConfigError for such a group if its Decider cannot finish requests
// (see After the handler).
//
// # Observability
//
// WithHook receives an Event for every request: scope, deciding rule and
// window, verdict, retry delay, decision source, backend error and whether
// the group is in shadow mode.
package middleware
