// Package rules parses, validates and prints the rule language of
// slidelimit: the text a handler uses to declare its rate limits.
//
// A rule group is a list of statements separated by semicolons:
//
//	user:10/min,200/d; ip:30/min; global:1000/h
//
// allows each user at most 10 requests in any minute and 200 in any day,
// each client IP at most 30 a minute, and everyone together at most 1000 an
// hour. A request is admitted only if every window of every rule that
// applies to it admits it.
//
// # Grammar
//
// In the EBNF of the Go specification, with the lexical rules below:
//
//	group     = statement { ";" statement } [ ";" ] .
//	statement = rule | roleRules | exempt | scope | outcomes | mode | fail | block
//	          | calendar | distinct | regions | share .
//
//	rule      = kind [ "(" name ")" ] [ "[" cost "]" ] ":" window { "," window } .
//	kind      = "ip" | "user" | "global" | "header" | "param" | "key" .
//	cost      = decimal | costname .
//	window    = limit "/" [ count ] unit [ "~" [ count ] unit ]
//	          | limit "/" "calendar" calunit | slots "concurrent" .
//	calunit   = "day" | "week" | "month" .
//	limit     = decimal [ suffix ] | "$" costname .
//	slots     = decimal [ suffix ] .
//	suffix    = "k" | "M" | "G" | "T" | "Ki" | "Mi" | "Gi" | "Ti" .
//	count     = decimal .
//	unit      = "ms" | "s" | "sec" | "m" | "min" | "h" | "hour" | "d" | "day" .
//
//	roleRules = "role" "(" name ")" "=" rule { "&" rule } .
//	exempt    = "exempt" ":" name { "," name } .
//	scope     = "scope" ":" name .
//	outcomes  = "count" ":" status { "," status } .
//	status    = digit digit digit | digit "xx" .
//	mode      = "mode" ":" ( "enforce" | "shadow" ) .
//	fail      = "fail" ":" ( "open" | "closed" | "local" ) .
//	block     = "block" ":" [ count ] unit .
//	calendar  = "calendar" ":" zone .
//	distinct  = "distinct" ":" name .
//	regions   = "regions" ":" "local" .
//	share     = "share" "(" name ")" ":" decimal "%" .
//	zone      = zonechar { zonechar } .
//
//	decimal   = digit { digit } .
//	name      = namechar { namechar } .
//	costname  = letter { namechar } .
//	zonechar  = namechar | "/" | "+" .
//
// Spaces and tabs may appear between any two tokens, where a token is a
// keyword, a number, a unit, a name, a limit function ($name, with no
// space after the $) or one of ; : , ( ) [ ] = & / ~; so
// "ip : 5 / 30 s" is "ip:5/30s". No other white space is allowed. Keywords
// and units are lower case. A single trailing semicolon is allowed, so
// groups can be built by concatenation; any other empty statement, and an
// empty or blank input, is an error.
//
// A window LIMIT/COUNT UNIT admits at most LIMIT requests in any span of
// COUNT units; COUNT defaults to 1, and m is a minute. LIMIT may carry a
// suffix, with no space before it: k, M, G and T multiply by 1000, 10^6,
// 10^9 and 10^12, Ki, Mi, Gi and Ti by 1024, 1024^2, 1024^3 and 1024^4, so
// "10k/h" is "10000/h" (Group.String prints the plain number). Numbers too large for
// an int64 are reported as out of range, never wrapped. The units us, µs and
// ns are not part of the grammar; they are recognised only so that
// "1/500us" is reported as a period below 1ms.
//
// # Costs
//
// By default a request counts 1 in every window of its rules. A cost in
// brackets after the kind (and its name) says what it counts instead:
//
//	user:10/min; user[bytes]:2Gi/d
//
// allows each user 10 downloads a minute and 2 GiB a day. A cost is either
// a positive decimal constant, as in ip[5]:100/min (each request counts 5,
// so 20 fit in a minute), or the name of a cost function (a letter, then
// letters, digits, '_', '-' or '.') that the middleware calls for every
// request before its handler runs (middleware.WithCostFunc). A rule with
// a cost is a rule of its own: its ID carries the cost ("user[bytes]",
// "key(account)[bytes]"), so user and user[bytes] may share a list and
// never share entries, while user[bytes] twice in a list is a duplicate. A
// constant cost larger than the limit of one of its windows could never be
// admitted and is rejected; leading zeros are dropped ("ip[05]" is
// "ip[5]"). Cost 0 is rejected.
//
// # Limit functions
//
// A window's limit may name a limit function instead of a number, with a
// dollar sign and a name spelled like a cost function's:
//
//	key(tenant):$quota/min; ip:100/min
//
// allows each tenant what the function registered as quota returns for
// the request (middleware.WithLimitFunc), such as the figure of the
// tenant's contract, in any minute. The window is then Window{Period:
// time.Minute, LimitFunc: "quota"} with Limit 0 until the middleware
// resolves it per request; a window has a limit or a limit
// function, never both. Everything else about the window is as written:
// grains ($quota/d~15min), costs (user[bytes]:$bytes/d) and static windows
// beside it (key(tenant):10/s,$quota/min). The value a function returns is
// held to the caps of a written limit (at least 1, at most 100,000 or
// 2^50, see Rules). Because a sliding log stores requests rather than
// limits, a new value applies at once to the requests already counted:
// lowering a limit below what a subject used denies until enough of them
// leave the window, raising it admits at once.
//
// # Grains
//
// A window may state its grain after a tilde: 20000/d~15m. The engine may
// then merge the requests of each grain into one entry that leaves the
// window only at the end of its grain, so the window never admits more
// than its limit in any span of its period and denies at most one grain
// earlier than an exact window would, while holding about period/grain
// entries per subject whatever the limit. A grain is at least 1 ms, a
// whole number of milliseconds, shorter than the period, divides the
// period into whole grains, and splits it into at most 10,000 grains.
// A window without a grain is exact, as before.
//
// # In-flight windows
//
// A window "N concurrent" bounds how many requests of a subject run at
// once, not how many start in a span of time:
//
//	user:3 concurrent; user:10/min,2 concurrent
//
// lets each user run at most 3 requests at the same time (in the second
// group, also at most 10 a minute, and only 2 at once). A request is
// admitted only if every window of every rule has room and it finds a
// free slot in every in-flight window; it then holds one slot per such
// rule until its handler ends, however it ends (see the middleware and
// engine packages). Its Window has Concurrent set and no period. A rule
// has at most one in-flight window, it takes no grain, its limit is at
// most 100,000, and a rule with a cost has none: user[bytes] counts
// units of cost, while slots count requests.
//
// # Calendar windows
//
// A window LIMIT/calendar UNIT counts everything admitted since the start
// of the current calendar period, in the group's time zone: local
// midnight (day), Monday's local midnight (week, ISO 8601) or the 1st's
// (month). At the boundary the window is empty again:
//
//	user[bytes]:1Gi/d~15min,100Gi/calendar month; calendar:Asia/Shanghai
//	key(tenant):$quota/calendar month
//
// The statement calendar:ZONE names an IANA time zone for every calendar
// window of the group; without it they follow UTC, never the process's
// local zone. Boundaries follow the zone's wall clock,
// so a day on which the clocks change lasts 23 or 25 hours. A calendar
// window is checked with every other window of the request, all or
// nothing, and stores one counter per subject and period whatever its
// limit, so its limit may go up to 2^50; it takes no grain, is
// not an in-flight window, and a rule has at most one per unit. Its
// Window has Calendar set and no Period. A zone name that time.LoadLocation
// cannot load (or "Local") is an error naming the zone; loading the zone
// database is the application's concern (import time/tzdata to embed it
// where the system has none).
//
// # Distinct values
//
// The statement distinct:NAME makes every rule of the group that counts
// requests (no cost, and not in-flight windows) count distinct values
// instead: NAME is path (the request's URL path) or a key function
// registered with the middleware's WithKeyFunc:
//
//	user:10/min,200/d; user[bytes]:1Gi/d; distinct:path
//
// lets each user fetch 10 different files a minute and 200 a day, however
// many range requests each takes, while the byte quota counts every
// request. A request whose value a window already counts is admitted
// there without counting again; cost rules count every request and
// in-flight windows every running request; a request refused anywhere
// counts nowhere. See the engine package (Check.Distinct) for how values
// age out.
//
// # Regions
//
// The statement regions:local keeps a group's counts in the region that
// decides, for a rule whose regions share their limits
// (docs/regions.md); Group.Regional holds it. Without it a group is
// shared, so regions:global is not written. Without regions
// (slidelimit.WithRegions) the statement changes no decision.
//
// # Shares
//
// The statement share(CLASS):P% gives a throttle's calls of class CLASS
// (a name spelled like a role's) P percent of its admissions, less a turn
// or two, while calls of several classes wait; a share its class leaves
// unused is lent to the others:
//
//	global:20/s; share(critical):30%
//
// P is a whole number from 1 to 100; a class has at most one share, and
// the shares of a group add up to at most 100%. Group.Shares holds them in
// declaration order. Only throttles take shares: a route's requests do not
// wait, and its group with a share is refused.
//
// # Scope, count, mode, fail, block, calendar, distinct, regions
//
// Within one group scope, count, mode, fail, block, calendar, distinct and
// regions may each appear once; exempt may
// appear more than once and its roles are concatenated. Mode enforce is the
// zero Mode and so is not printed back.
//
// # Counting by outcome
//
// A count: statement lists the response statuses whose requests stay
// counted, by code (401) or class (4xx), codes from 100 to 599:
//
//	key(account):5/d; ip:50/h; count:401
//
// allows at most 5 failed logins (401) per account a day, however many
// succeed. Without count:, every admitted request counts. The middleware
// keeps this exact by reserving, then giving back: a request is admitted
// and counted atomically, in every window, before its handler runs, as
// without count:; once the handler has answered, a request whose status
// is not listed is removed from every window it was counted in. A request is thus counted while its outcome is unknown, so
// at most L requests whose outcome counts can be in flight or recorded in
// a window of limit L: ten concurrent wrong passwords let through at most
// as many as the window has room for, where checking after the handler
// would let all ten pass. The cost is on the side of denying: a request
// whose outcome will not count still takes room while its handler runs,
// and a handler that panics stays counted.
//
// Other transports may refuse rules they cannot serve and read count:
// items of their own, such as gRPC status code names (contrib/grpclimit).
//
// # Blocking
//
// A block: statement makes a denial last: once a rule of the group
// denies a subject, that subject is blocked on that rule for the block's
// duration from that first denial, whatever room its windows get back:
//
//	key(account):5/d; count:401; block:15m
//	ip:100/min; block:1h
//
// Every request the subject makes on that rule meanwhile is denied,
// with a Retry-After of the time left, and counts in no window; attempts
// during a block do not extend it (a subject that keeps trying is free
// again at the end, and a window's limit is not to be confused with the
// block's duration). Other subjects, and other rules of the same
// subject, are not blocked. Exempt roles are never blocked. The duration is
// a whole number of milliseconds from 1ms to 30 days, written
// like a period; Group.Block holds it (zero: no block). Resetting the
// rule and subject (slidelimit.Limiter.Reset) lifts the block. A group in shadow mode starts
// no block (the transports apply Block only when the group enforces): it
// never refuses, and a block it started would refuse the subject the
// moment the group is switched to enforce.
//
// # Names
//
// Role, scope and key names consist of ASCII letters, digits, '_', '-' and
// '.'. Param names must be ASCII Go identifiers, because they name
// http.ServeMux wildcards (see http.Request.PathValue). Header names are
// RFC 9110 tokens and are canonicalized with http.CanonicalHeaderKey, so
// header(x-api-key) and header(X-API-Key) are the same rule,
// header(X-Api-Key). The kinds header, param and key require a name; ip,
// user and global forbid one.
//
// # Rules
//
// Beyond the grammar, a group must satisfy these rules, which Parse and
// Group.Validate check with struct tags and struct-level rules of
// github.com/go-playground/validator/v10:
//
//   - A limit is at least 1. The limit of an exact window (no grain) of a
//     rule without a cost is at most 100,000: every admitted
//     request is a member of a Redis sorted set for the longest window of
//     its rule, so memory grows with the limit. The limit of a window
//     with a grain, and of any window of a rule with a cost, is at most
//     2^50 (1,125,899,906,842,624), below 2^53 so that
//     sums of costs stay exact in the doubles of Redis's Lua; their memory
//     does not grow with the limit (an exact window of a cost rule still
//     stores one entry per request: give it a grain, or a request rule,
//     to bound it).
//   - A constant cost is at most the limit of each window of its rule.
//   - A grain obeys the rules of the Grains section.
//   - A period is between 1ms and 30 days and a whole number of
//     milliseconds; an in-flight window has none.
//   - A rule has at most one in-flight window (N concurrent), with at
//     most 100,000 slots, and none when it has a cost.
//   - A rule has at least one window and no two with the same period.
//   - A list of rules (the defaults, or one role's) has no two with
//     the same ID (see Rule.ID); write one rule with several windows
//     instead. A rule of only in-flight windows may share its ID with
//     one of only rate windows ("user:1 concurrent; user:20/h"), which
//     count apart.
//   - A list of rules has at most 64 rules and 256 windows over
//     all of them: a request is decided in
//     one Redis call over its list, and the engine refuses larger ones. In a
//     group with distinct:, a rule without a cost has at most
//     30 windows besides its in-flight one.
//   - A role has at most one role(...)= statement, is exempt at most once, and is not
//     both exempt and given role rules: an exemption would make those rules dead
//     text, which is more likely a mistake than intent.
//   - A group has at least one rule, default or per role, unless it
//     exempts some role.
//
// # Canonical form
//
// Group.String prints a group canonically: rules, role rules, exempt,
// count, scope, mode, fail, block, calendar, distinct, regions and shares (in
// declaration order), in that order, joined by "; ", with each window's
// period and grain in the largest unit among ms, s, min, h and d that
// divides it and a count of 1 left out ("5/s", "10/30s", "1/90min", "2/d",
// "20000/d~15min"), calendar windows as "5/calendar month", in-flight windows as "3 concurrent", limits as plain numbers and costs without leading
// zeros ("user[bytes]:2147483648/d"). For every group
// g returned by Parse, Parse(g.String()) returns a group equal to g
// (reflect.DeepEqual), and g.String() is a fixpoint.
//
// # Errors
//
// Every error is an *Error, whose Syntax field is true when the text does
// not match the grammar and false when it does but breaks a rule. Its
// text locates the problem:
//
//	rules: "ip:0/s": limit 0 is below 1 at offset 3
//
// # Struct tags
//
// Routes reads handlers and their rule groups from struct tags:
//
//	type Handlers struct {
//		Files http.Handler `route:"GET /files/{id}" limit:"param(id):10/min; ip:100/min"`
//	}
//
// A route without rules says so with limit:"none", and gets the zero
// Group, which callers register unlimited:
//
//	Health http.HandlerFunc `route:"GET /healthz" limit:"none"`
//
// A route tag without a limit tag is an error (a misspelt key, as in
// limt:"...", would otherwise leave the route unlimited), as is a limit tag
// without a route tag; the error names a key of the field's tag that looks
// like a misspelling of the missing one. The route tag is checked as
// http.ServeMux would check it, so registration cannot panic on a
// malformed pattern; conflicts between different patterns are left to the
// ServeMux.
//
// Every exported field with a route tag, including fields promoted from
// embedded structs, must have a type implementing http.Handler and a
// non-nil value. Its limit tag, unless "none", is parsed and validated, and every
// param rule in it must name a wildcard of the pattern ({name} or
// {name...}), because any other name would count every request under the
// empty string. Tags are checked once per struct type and the result
// cached, so calling Routes per request or per server is cheap; handler
// values are read on every call. When v is not a struct or a pointer to
// one Routes returns no routes.
package rules
