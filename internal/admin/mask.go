package admin

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"slices"
	"strings"
	"time"

	"github.com/slidelimit/slidelimit/internal/keyparts"

	"github.com/slidelimit/slidelimit/internal/lifecycle"
	"github.com/slidelimit/slidelimit/internal/tally"
	"github.com/slidelimit/slidelimit/rules"
)

// Masked subjects: the subjects of the kinds in Config.Masked (header
// values by default: API keys) are never shown, sent or logged by the
// handler. Each is shown by its fingerprint, "~" and 12 base64url
// characters of a SHA-256 of the stored subject: the same in every
// process and every view (page, API, log line), so that an operator can
// follow one subject, and no way back to the value but guessing it. A
// masked subject is reset by its ref, which the handler maps back to the
// stored subject: a stored hash as is, a fingerprint through the last
// hour's denial tallies, where the page found it.

// fingerprintPrefix marks a fingerprint; a stored hash starts with "#".
const fingerprintPrefix = "~"

// Fingerprint returns the fingerprint of a stored subject, as the handler
// shows a masked subject; a throttle's learned blocks name their subjects
// by it (LearnedSubject).
func Fingerprint(stored string) string { return fingerprint(stored) }

// fingerprint returns the fingerprint of a stored subject.
func fingerprint(stored string) string {
	sum := sha256.Sum256([]byte("slidelimit masked subject\x00" + stored))
	return fingerprintPrefix + base64.RawURLEncoding.EncodeToString(sum[:9])
}

// masks reports whether subjects of kind are masked.
func (h *handler) masks(kind rules.Kind) bool {
	return slices.Contains(h.masked, kind)
}

// entry is a tally entry as the handler shows it (Denied), with what it
// needs to peek at it and reset it: its subject as stored.
type entry struct {
	Denied
	stored string // the engine's subject, or its stored hash (hashed)
	hashed bool
}

// denied turns a tally entry into what the application knows, less what it
// masks: a value, the start of a long value (Truncated), a stored hash no
// process of this handler knows the value of (Hashed), or a fingerprint
// (Masked). Ref is set when Subject is not the whole value.
func (h *handler) denied(t tally.Denials) entry {
	e := entry{Denied: Denied{Scope: t.Scope, Rule: t.Rule, Subject: t.Subject, Denied: t.Denied}, stored: t.Subject}
	if t.Hashed && t.Hash == "" {
		t.Hash = t.Subject
	}
	if t.Hash != "" {
		e.stored, e.hashed = t.Hash, true
	}
	var kind rules.Kind
	var v string
	ok := false
	if !t.Hashed {
		kind, v, ok = lifecycle.SubjectValue(t.Subject)
	}
	if ok {
		e.ByIP = kind == rules.IP && ruleKind(t.Rule) != rules.IP
	} else {
		// A value no process of this handler knows (or not the
		// middleware's): masked by its rule's kind, so that every
		// process shows a masked subject alike.
		kind = ruleKind(t.Rule)
	}
	switch {
	case h.masks(kind):
		e.Subject, e.Masked = fingerprint(e.stored), true
		e.Ref = e.Subject
		if e.hashed {
			e.Ref = e.stored // found without the tallies
		}
	case t.Hashed:
		e.Hashed, e.Ref = true, t.Hash
	case !ok:
	case t.Truncated:
		e.Subject, e.Truncated, e.Ref = v+"…", true, t.Hash
	default:
		e.Subject = v
	}
	return e
}

// shownValue returns what the handler may show or log of value, a subject
// of rule ruleID (by client address when byIP) given by the caller:
// value, or its fingerprint when masked.
func (h *handler) shownValue(ruleID, value string, byIP bool) string {
	kind := ruleKind(ruleID)
	if byIP {
		kind = rules.IP
	}
	if value == "" || !h.masks(kind) {
		return value
	}
	return fingerprint(lifecycle.SubjectOf(kind, value))
}

// resolve maps ref, from an entry of the page or the API, to the stored
// subject of rule ruleID in scope: a stored hash is one; a
// fingerprint is looked for among the last hour's denied subjects.
func (h *handler) resolve(ctx context.Context, scope, ruleID, ref string) (stored string, hashed bool, err error) {
	if keyparts.IsStoredHash(ref) {
		return ref, true, nil
	}
	if !strings.HasPrefix(ref, fingerprintPrefix) {
		return "", false, &BadInputError{Err: errBadRef}
	}
	top, err := h.src.TopDenied(ctx, time.Hour, 0)
	if err != nil {
		return "", false, err
	}
	for _, t := range top {
		if e := h.denied(t); e.Scope == scope && e.Rule == ruleID && e.Ref == ref {
			return e.stored, e.hashed, nil
		}
	}
	return "", false, &BadInputError{Err: errUnknownRef}
}
