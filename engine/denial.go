package engine

import (
	"unicode/utf8"

	"github.com/slidelimit/slidelimit/engine/internal/plan"
	"github.com/slidelimit/slidelimit/rules"
)

// denialPreview is how much of a subject longer than maxRawSubject a
// denial hook is given to show it: its first bytes, never the whole, so
// that the denial tallies never hold a long subject.
const denialPreview = 48

// Denial is a denial of Allow by a window, as WithDenialHook reports it.
// Its strings may be views of the request's: a hook that keeps one past
// the call copies it.
type Denial struct {
	// Scope is the request's scope.
	Scope string
	// Kind, Name and Cost are those of the denying check's rule.
	Kind rules.Kind
	Name string
	Cost string
	// Subject is the denying check's subject, or its stored hash ("#" and
	// 43 base64url characters) when Hashed.
	Subject string
	// Shown is what may be shown of a hashed subject: the subject up to
	// 128 bytes, or its first 48 bytes when longer (then Cut). It is ""
	// for a check given by its hash.
	Shown string
	// Hashed reports that Subject is the stored hash.
	Hashed bool
	// Cut reports that Shown is the start of a longer subject.
	Cut bool
}

// WithDenialHook sets a function called with each denial of Allow by a
// window: by Redis, the cache of denials or the fallback limiter. It is
// called on the request's goroutine, and should return quickly.
func WithDenialHook(hook func(Denial)) Option {
	return func(c *config) error {
		c.denied = hook
		return nil
	}
}

// preview returns the first denialPreview bytes of s, cut at the start of
// a UTF-8 character.
func preview(s string) string {
	n := min(len(s), denialPreview)
	for n > 0 && n < len(s) && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

// noteDenial reports d, a decision of Allow for req, to the denial hook.
func (e *Engine) noteDenial(req *Request, d *Decision) {
	e.noteDenialOf(req, d, nil)
}

// noteDenialOf is noteDenial with the plan of the decision, whose keys
// hold the stored hash of a hashed subject; without a plan (nil), the
// subject is hashed here. A hashed subject is given by its stored hash,
// made at denial time, and at most its first denialPreview bytes: the
// hook never sees a long subject whole, and its writes only send.
func (e *Engine) noteDenialOf(req *Request, d *Decision, p *plan.Plan) {
	hook := e.denied
	if hook == nil || d.Allowed || d.Denied.Window.Limit == 0 || d.Denied.Check >= len(req.Checks) {
		return // allowed, or denied by no window (fail-closed)
	}
	c := &req.Checks[d.Denied.Check]
	k := Denial{Scope: req.Scope, Kind: c.Kind, Name: c.Name, Cost: c.Rule.Cost, Subject: c.Subject}
	switch {
	case c.Hashed:
		k.Hashed = true
	case e.keyer.HashAll || len(c.Subject) > plan.MaxRawSubject:
		k.Hashed, k.Shown = true, c.Subject
		if len(c.Subject) > plan.MaxRawSubject {
			k.Shown, k.Cut = preview(c.Subject), true
		}
		k.Subject = ""
		if p != nil {
			k.Subject = p.StoredHash(e.keyer.Keyer, d.Denied.Check)
		}
		if k.Subject == "" {
			k.Subject = string(e.keyer.AppendHashed(nil, c.Subject))
		}
	}
	hook(k)
}
