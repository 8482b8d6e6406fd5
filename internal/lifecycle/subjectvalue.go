package lifecycle

import (
	"strings"

	"github.com/slidelimit/slidelimit/rules"
)

// SubjectValue reverses SubjectOf: it returns the kind and the value of a
// subject the middleware counts (as found in engine.Check.Subject and the
// engine's denial tallies), so that an admin view shows "alice" or
// "192.0.2.7" rather than the middleware's encoding. kind is rules.IP for
// a request counted by client address, whatever its rule, and
// rules.Global, with an empty value, for a global rule's subject. ok is
// false for a subject the middleware never makes.
func SubjectValue(subject string) (kind rules.Kind, value string, ok bool) {
	if subject == subjectGlobal {
		return rules.Global, "", true
	}
	for _, p := range subjectPrefixes {
		if v, found := strings.CutPrefix(subject, p.prefix); found && v != "" {
			return p.kind, v, true
		}
	}
	return "", "", false
}

// subjectPrefixes are the prefixes SubjectOf gives each kind's values.
var subjectPrefixes = []struct {
	kind   rules.Kind
	prefix string
}{{rules.IP, subjectIP}, {rules.User, subjectUser}, {rules.Header, subjectHeader}, {rules.Param, subjectParam}, {rules.Key, subjectKey}}
