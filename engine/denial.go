package engine

import (
	"unicode/utf8"

	"github.com/slidelimit/slidelimit/engine/internal/plan"
	"github.com/slidelimit/slidelimit/internal/access"
)

// denialPreview is how much of a subject longer than maxRawSubject a
// denial hook is given to show it: its first bytes, never the whole, so
// that the denial tallies never hold a long subject.
const denialPreview = 48

// The root package's denial tallies (internal/tally) are fed by a hook
// and write with the engine's client, prefix and clock; they reach both
// through package access, so that they are no part of the engine's API.
func init() {
	access.SetDenialHook = func(e any, hook func(access.Denial)) { e.(*Engine).denied = hook }
	access.EngineStore = func(e any) access.Store {
		en := e.(*Engine)
		return access.Store{
			Client:        en.client,
			Prefix:        en.keyer.prefix,
			Timeout:       en.timeout,
			Log:           en.log,
			Now:           en.now,
			Down:          func() bool { return en.group == groupAll && en.doms.one.down.Load() },
			AppendEscaped: appendEscaped,
		}
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
	k := access.Denial{Scope: req.Scope, Kind: c.Kind, Name: c.Name, Cost: c.Limiter.Cost, Subject: c.Subject}
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
