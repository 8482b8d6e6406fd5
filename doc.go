// Package slidelimit rate-limits HTTP APIs with exact sliding windows kept
// in Redis. A handler declares a rule group — several limits over several
// subjects, with role exemptions and role rules — and every request is
// checked against all of its windows in one atomic Redis call.
//
//	type API struct {
//		Files http.HandlerFunc `route:"GET /files/{id}" limit:"ip:5/s,100/min; user:1000/h; exempt:superadmin; role(admin)=ip:30/min"`
//	}
//
//	lim, err := slidelimit.New(rdb)
//	...
//	err = lim.Register(mux, &API{Files: files})
//
// allows 5 requests a second and 100 a minute per client IP and 1000 an hour
// per user on GET /files/{id}, exempts super-admins, and gives admins 30 a
// minute per IP instead.
//
// # Pieces
//
//   - Package rules defines the rule language (rules.Parse) and reads struct
//     tags (rules.Routes).
//   - Package role carries the caller's identity in the request context and
//     resolves exemptions and role rules; the service's authentication sets
//     it, and no client header is ever trusted for it.
//   - Package engine makes the decisions in Redis.
//   - Package middleware turns a group into net/http middleware: it finds
//     the client address (trusted proxies, IPv6 /64 grouping), builds the
//     subjects, calls the engine once, and writes the RateLimit and
//     RateLimit-Policy fields, 429 problem responses with Retry-After, and 503
//     when Redis is down and the group fails closed.
//
// This package ties them together: New creates the engine and holds the
// middleware options; Register and Handle wrap and register handlers on an
// http.ServeMux with the route pattern as the scope of their windows, so
// that /files/1 and /files/2 share windows; Middleware serves other routers.
// Peek and Reset show and clear the windows one subject ("alice",
// "192.0.2.7") has in one scope, for admin tools, mapping the subject as
// the middleware does; Reset also lifts the subject's block (a block:
// statement). SetRules changes (or, with no text, restores) the rule group
// of a scope at run time in every process sharing the Redis and key prefix
// (rule overrides), and limit functions ($quota in a window,
// WithLimitFunc) give each request its own limit.
// AdminHandler serves the operator's view (internal/admin): the most denied
// subjects fleet-wide, active blocks, one subject across routes, and a
// reset, from denial tallies the Limiter keeps and writes to Redis once a
// second (see docs/operations.md).
//
// A cost rule can settle after the handler to what a request really
// consumed: middleware.WithSettle with middleware.Settlement{Written: true}
// counts the bytes a download actually sent, and middleware.ReportCost lets
// a handler report an application cost such as tokens (see
// engine.Engine.Finish and Outcome.Actual for the semantics).
//
// Throttle points the same engine the other way, at calls out: a fleet
// of processes stays under another service's limits together, with Wait
// blocking a call in arrival order across the fleet until every window
// has room, Permit.Finish settling its cost to what the upstream charged,
// and Transport doing both for an http.Client, settled from the response's
// headers or the body the caller read (see docs/throttle.md).
//
// # Configuration
//
// The options of this package cover what most services set: WithRoles
// and WithIdentity (who calls, in which roles), WithLogger, WithFailMode,
// WithKeyPrefix, WithTimeout, WithHashedSubjects, the functions rule
// text names (WithKeyFunc, WithCostFunc, WithLimitFunc) and WithHook.
// Each translates to the option of the engine or middleware package that
// owns the setting; WithMaxHold and WithTransitBound, of throttles only, belong here. The rest, such as trusted proxies or a denied
// handler, goes through the escape hatches WithEngineOptions and
// WithMiddlewareOptions. Later options win.
//
//	lim, err := slidelimit.New(rdb,
//		slidelimit.WithRoles("user", "admin"),
//		slidelimit.WithTimeout(50*time.Millisecond),
//		slidelimit.WithKeyFunc("tenant", tenantOf),
//		slidelimit.WithMiddlewareOptions(middleware.WithTrustedProxies("10.0.0.0/8")),
//	)
//
// # Errors
//
// Every mistake of configuration, found by New, Register, Handle,
// Middleware, SetRules or Throttle, and every call that names nothing
// there (Peek, Reset, a throttled Call), is a *ConfigError with a Kind,
// naming where it is (route, field, tag, rule text and offset) and
// wrapping the cause. Redis failures never are one, so one errors.As tells
// them apart.
//
// # Inspecting subjects
//
// Limiter.Peek and Reset take a scope (a route pattern given to Register
// or Handle, or a scope: name), a rule ID as rules.Rule.ID writes it
// ("ip", "user", "global", "header(X-Api-Key)", "param(id)",
// "key(tenant)"; header names in any case) and the raw subject the rule
// counts: an address for ip ("192.0.2.7", or an IPv6 network
// "2001:db8::/64"), a user id, a header, path or key value; it is ignored
// for global. The subject is mapped as the group's middleware maps it,
// with the options it was built with. The requests a user, header,
// param or key rule counted by client IP (callers without identity or
// value, roles in role.Policy.ByIP) are seen with byIP set; a global
// rule never counts by IP. Input that names no windows is a
// *ConfigError of kind "scope" or "limiter", or another error
// for a subject the rule never counts; when Redis fails, Peek returns the fail mode's
// Decision with the error.
//
// Every rule with that ID in the scope, in the defaults or a role's
// override of any group registered in it, counts into the same Redis key:
// a key is (scope, rule ID, subject), not the windows. Those rules
// may declare different windows ("user:10/min" for everyone,
// "role(trial)=user:3/min,20/d"), so Peek reports the union of their
// windows, one WindowState per distinct limit and period, ordered by
// period and then limit. Decision.Allowed is true only when every window
// of the union has room, which is stricter than what a single caller
// faces when the windows differ. A window longer than any enforced on the
// key so far sees only the requests the key still retains.
//
// A blocked subject (block:) is reported with Decision.Blocked, Allowed
// false, Remaining 0 and RetryAfter at least the block's time left; Reset
// lifts the block. Windows[i].Check is 0 unless groups of the scope were
// given different middleware.WithIPv6Prefix options, so that an IPv6
// subject maps to several stored subjects, one check each. A window whose
// limit comes from a limit function ($quota/min) is reported with the
// largest limit it may have (100,000, or 2^50 with a grain or a cost). A
// group built by Middleware without a scope: statement gets its scope per
// request, so it is taken to be in every scope.
//
// # Other routers
//
// Middleware returns a func(http.Handler) http.Handler, which chi and
// gorilla/mux use directly. They do not set http.Request.Pattern, so give the
// scope with a scope: statement, middleware.WithScope or
// middleware.WithScopeFunc.
package slidelimit
