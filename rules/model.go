package rules

import (
	"iter"
	"time"
)

// Kind names what a rule counts by: the subject whose requests share a
// set of windows.
type Kind string

// The rule kinds of the rule language.
const (
	// IP counts by client IP address (the middleware decides which address
	// is the client's; see the middleware package).
	IP Kind = "ip"
	// User counts by the authenticated user in the request context; a
	// request without identity is counted by its IP.
	User Kind = "user"
	// Global counts every request of the scope together.
	Global Kind = "global"
	// Header counts by the value of the request header named by the
	// rule's Name.
	Header Kind = "header"
	// Param counts by the route path value named by the rule's Name
	// (http.Request.PathValue).
	Param Kind = "param"
	// Key counts by the value of a key function registered under the
	// rule's Name.
	Key Kind = "key"
)

// named reports whether rules of kind k take a name in parentheses, as
// in header(X-API-Key).
func (k Kind) named() bool { return k == Header || k == Param || k == Key }

// Bounds of a window's grain; the other bounds of the rule language are
// in internal/rulelimits (see the package documentation, section Rules).
const (
	// minGrain is the shortest grain a window may have.
	minGrain = time.Millisecond
	// maxGrains is the largest number of grains a window's period may be
	// split into. A window with a grain denies at most one grain earlier
	// than an exact one, so grains finer than 1/10,000 of the period buy
	// less than 0.01% of the period in precision, while each grain may cost
	// a sorted-set member (100-140 bytes beyond 128 members): 10,000 grains
	// bound a window to about 1.4 MB, a tenth of an exact window at
	// the largest exact limit.
	maxGrains = 10_000
)

// Window is a sliding window: at most Limit requests (or units of cost) in
// any span of Period. A request at time t is admitted iff fewer than Limit
// requests were admitted in (t-Period, t].
//
// LimitFunc, when not empty, names a limit function ($name in rule text)
// that gives the limit per request, such as a customer's quota; Limit is
// then 0 until the middleware resolves it per request.
//
// Grain, when not zero, lets the engine merge the requests of each span of
// Grain into one entry that leaves the window at the end of its grain: the
// window never admits more than Limit in any span of Period, may deny at most
// one grain earlier than an exact window would, and holds about
// Period/Grain entries per subject whatever the limit. A grain is at least
// 1 ms, a whole number of milliseconds, shorter than the period, divides
// it, and splits it into at most 10,000 grains.
//
// Concurrent makes the window an in-flight window, written "N concurrent":
// at most Limit requests of the subject running at once, across every
// process, instead of a count over time. Its Period and Grain are zero. A
// request holds one slot of each in-flight window from its admission until
// it ends (see the engine package: Engine.Release). A rule has at most
// one in-flight window, and a rule with a cost none: a cost counts
// units, an in-flight window counts requests.
type Window struct {
	// The bounds of Period (1ms to 30 days, whole milliseconds) and the
	// caps of Limit (100,000 for an exact window of a rule without a
	// cost, 2^50 otherwise) are struct-level rules: the period's depend on
	// Concurrent, the limit's on the rule's cost. A Limit of 0 is checked against LimitFunc by a
	// struct-level rule of Window.
	Limit      int64 `validate:"omitempty,min=1"`
	Period     time.Duration
	Grain      time.Duration // checked against Period by a struct-level rule
	LimitFunc  string        // checked by a struct-level rule
	Concurrent bool
	// Calendar, when not empty, makes the window a calendar window
	// (LIMIT/calendar day|week|month): "day", "week" (ISO 8601, from
	// Monday) or "month", at most Limit requests (or units of cost) since
	// the start of the current period in the group's zone
	// (Group.Calendar), counted in one counter per subject and period. Its
	// Period and Grain are zero. Checked by a struct-level rule.
	Calendar string
}

// Rule is a set of windows applied to one subject kind. Name is set only
// for named kinds (header, param, key).
//
// Cost says what a request counts in the windows: empty for 1, a positive
// decimal integer such as "5" for that constant, or the name of a cost
// function the middleware calls per request (WithCostFunc), such as
// "bytes". A rule with a cost is a rule of its own (see ID): user and
// user[bytes] may both appear in a list and never share entries.
type Rule struct {
	Kind    Kind     `validate:"required,oneof=ip user global header param key"`
	Name    string   // checked against Kind by a struct-level rule
	Cost    string   // checked by a struct-level rule
	Windows []Window `validate:"min=1,dive"`
}

// RoleRules replaces a group's default rules for requests by Role.
type RoleRules struct {
	Role  string `validate:"required,rulename"`
	Rules []Rule `validate:"min=1,dive"`
}

// Mode says whether a group denies requests.
type Mode string

// Modes. The zero value is Enforce.
const (
	Enforce Mode = ""
	// Shadow counts and reports would-be denials but never denies.
	Shadow Mode = "shadow"
)

// FailMode says what happens when Redis is unreachable or errs.
type FailMode string

// Fail modes. The zero value lets the engine's default decide.
const (
	FailDefault FailMode = ""
	// FailOpen allows the request and reports the error.
	FailOpen FailMode = "open"
	// FailClosed denies the request and reports the error.
	FailClosed FailMode = "closed"
	// FailLocal decides with an in-process sliding-window limiter using the
	// same rules until Redis answers again.
	FailLocal FailMode = "local"
)

// Group is a parsed rule group: everything a handler declares about its
// limits. A Group returned by this package must be treated as read-only; its
// slices may be shared.
type Group struct {
	// Rules apply to every request without role rules or an exemption.
	Rules []Rule `validate:"dive"`
	// RoleRules replace Rules for requests by their role, in
	// declaration order.
	RoleRules []RoleRules `validate:"dive"`
	// Exempt lists roles whose requests skip every rule.
	Exempt []string `validate:"dive,rulename"`
	// Count, when not empty, lists the response statuses whose requests
	// stay counted: each a code such as "401" or a class such as "4xx".
	// An admitted request whose response has another status is given back
	// (see the package documentation). Empty counts every admitted request.
	Count []string `validate:"dive,status"`
	// Scope, when set, makes every handler with the same scope share
	// windows; when empty the route pattern is the scope.
	Scope string `validate:"omitempty,rulename"`
	// Mode is Enforce or Shadow.
	Mode Mode `validate:"omitempty,oneof=shadow"`
	// Fail is the behaviour when Redis is unreachable.
	Fail FailMode `validate:"omitempty,oneof=open closed local"`
	// Block, when not zero, blocks a subject on a rule for that long
	// from the first time the rule denies it: every request the subject
	// makes there is denied until then, without counting in any window,
	// and attempts meanwhile do not extend the block (statement
	// block:15m). It is a whole number of milliseconds from 1ms to 30
	// days. Zero blocks nothing.
	Block time.Duration `validate:"omitempty,min=1ms,max=720h,wholems"`
	// Calendar is the IANA time zone of the group's calendar windows
	// (statement calendar:Asia/Shanghai); empty means UTC, never the
	// process's local zone. Validation loads it with time.LoadLocation.
	Calendar string `validate:"omitempty,zone"`
	// Distinct, when set, makes every rule of the group that counts
	// requests (no cost; not in-flight windows) count distinct values
	// instead of requests (statement distinct:path): "path" for the
	// request's URL path, or the name of a key function. A request whose
	// value a window already counts is admitted there without counting
	// again.
	Distinct string `validate:"omitempty,rulename"`
	// Regional keeps the group's counts in the region that decides
	// (statement regions:local) when a rule spans regions. No rule
	// spans regions yet, so today it changes nothing; see docs/regions.md.
	Regional bool
	// Shares divide a throttle's admissions between classes of calls
	// (statements share(CLASS):P%), in declaration order; each class at
	// most once, adding up to at most 100%. Only throttles take them.
	Shares []Share `validate:"dive"`
}

// lists yields the group's rule lists: the defaults, with role "", then
// each role's rules with its role, in declaration order.
func (g *Group) lists() iter.Seq2[string, []Rule] {
	return func(yield func(string, []Rule) bool) {
		if !yield("", g.Rules) {
			return
		}
		for _, rr := range g.RoleRules {
			if !yield(rr.Role, rr.Rules) {
				return
			}
		}
	}
}
