package lifecycle_test

import (
	"testing"

	"github.com/slidelimit/slidelimit/internal/lifecycle"
	"github.com/slidelimit/slidelimit/rules"
)

// TestSubjectValue: SubjectValue reverses SubjectOf for every kind.
func TestSubjectValue(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		kind  rules.Kind
		value string
	}{{rules.IP, "192.0.2.7"}, {rules.User, "alice"}, {rules.Header, "k:1"}, {rules.Param, "7"}, {rules.Key, "ip:x"}, {rules.Global, ""}} {
		s := lifecycle.SubjectOf(tc.kind, tc.value)
		kind, v, ok := lifecycle.SubjectValue(s)
		if !ok || kind != tc.kind || v != tc.value {
			t.Errorf("SubjectValue(%q) = %s %q %v, want %s %q", s, kind, v, ok, tc.kind, tc.value)
		}
	}
	for _, s := range []string{"", "user:", "nope:x", "#hash"} {
		if _, _, ok := lifecycle.SubjectValue(s); ok {
			t.Errorf("SubjectValue(%q) ok", s)
		}
	}
}
