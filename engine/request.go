package engine

import (
	"time"

	"github.com/slidelimit/slidelimit/rules"
)

// Check is one rule applied to one subject. The windows of Rule count
// the requests of Subject (an IP, a user id, a header value) within a scope.
type Check struct {
	rules.Rule
	// Subject is the counted value. It may hold any bytes; the engine
	// encodes it so that it can never collide with another subject or
	// change a Redis Cluster hash tag.
	Subject string
	// Hashed says that Subject is not the value but its stored hash, as
	// the operator's page reports it. Keys are stored hashed for subjects
	// over 128 bytes, or all with WithHashedSubjects; an operator's tool
	// knows them by hash only. The check then names the same keys as the
	// value would. A Hashed Subject that is not a stored hash ("#" and 43
	// base64url characters) is an invalid request.
	Hashed bool
	// Cost is what the request counts in this check's windows. Zero counts
	// the rule's constant cost (Rule.Cost "5"), or 1. A negative
	// cost, or one above 1 for a rule without a cost, is invalid.
	Cost int64
	// Block, when positive, blocks Subject on this rule, in this scope,
	// for that long from the first denial by one of its windows. Until the
	// block ends, every request of Subject with this check is denied,
	// counts nowhere, and does not extend the block. Block is rounded up to
	// whole milliseconds. Checks sharing a key block for the longest of
	// their Blocks. Zero blocks nothing.
	Block time.Duration
	// Distinct, when not empty, is the value the request counts in the
	// check's windows instead of itself: the rule statement distinct:NAME,
	// such as the URL path. A window that holds the value admits it
	// without counting again. The rule must have no cost and no grain.
	//
	// A value counts at its first request. It counts again in every window
	// at a request that finds it older than the shortest window. Each
	// window holds the values whose last count lies inside it. A value is
	// stored as a member derived from it, hashed when subjects are
	// (WithHashedSubjects). A give-back or a rollback leaves a value counted,
	// since others' requests may share it, erring on the side of denying.
	// So does the local fallback: it counts requests, starting from the
	// number of values Redis last reported.
	Distinct string
}

// Request is one rate-limit decision. The request is admitted only if every
// window of every check has room. It is then counted in all of them,
// otherwise in none.
type Request struct {
	// Scope names the windows' owner: a route pattern such as
	// "GET /files/{id}" or a shared scope name.
	Scope string
	// Checks are the rules to apply.
	Checks []Check
	// Fail is the behaviour when Redis fails. FailDefault uses the
	// engine's default (see WithFailMode).
	Fail rules.FailMode
	// Zone is the time zone of the request's calendar windows
	// (rules.Window.Calendar): their periods start at its local midnight.
	// Nil is UTC, never the process's local zone.
	Zone *time.Location
	// Regional keeps the request's counts in this region, as the
	// statement regions:local does (rules.Group.Regional): with
	// WithRegions, it is decided as without regions and not replicated.
	// Without WithRegions it changes nothing.
	Regional bool
}

// One returns a Request with a single check: subject, counted by a rule
// of kind with the given windows, in scope. It is the one-line form of "may
// user 42 reply? At most 5 per minute":
//
//	d, err := eng.Allow(ctx, engine.One("reply", rules.User, "42", rules.Window{Limit: 5, Period: time.Minute}))
//
// For a named kind (header, param, key) or several checks, build the
// Request directly.
func One(scope string, kind rules.Kind, subject string, windows ...rules.Window) Request {
	return Request{
		Scope: scope,
		Checks: []Check{{
			Rule:    rules.Rule{Kind: kind, Windows: windows},
			Subject: subject,
		}},
	}
}
