package lifecycle_test

import (
	"errors"
	"testing"

	"github.com/slidelimit/slidelimit/internal/lifecycle"
	"github.com/slidelimit/slidelimit/role"
	"github.com/slidelimit/slidelimit/rules"
)

// checkRoles is role.Policy.Check for the declared roles.
func checkRoles(g rules.Group, declared []string) error {
	p := role.Policy{}
	for _, r := range declared {
		p.Roles = append(p.Roles, role.Role(r))
	}
	return p.Check(g)
}

func TestCheckRoles(t *testing.T) {
	t.Parallel()
	declared := []string{"user", "admin", "superadmin"}
	steps := []struct {
		text     string
		declared []string
		want     string // the error's text, or "" for none
	}{
		{"ip:5/s; exempt:superadmin; role(admin)=ip:30/min", declared, ""},
		{"ip:5/s; exempt:superadmn", declared, `rules: "ip:5/s; exempt:superadmn": role "superadmn" is not declared (declared roles: admin, superadmin, user) at offset 15`},
		{"ip:5/s; role(admn)=ip:30/min", declared, `rules: "ip:5/s; role(admn)=ip:30/min": role "admn" is not declared (declared roles: admin, superadmin, user) at offset 13`},
		// Role rules print before exempt:, so they come first in the text.
		{"exempt:superadmn; role(admn)=ip:30/min", declared, `rules: "role(admn)=ip:30/min; exempt:superadmn": role "admn" is not declared (declared roles: admin, superadmin, user) at offset 5`},
		{"exempt:admin,ops", declared, `rules: "exempt:admin,ops": role "ops" is not declared (declared roles: admin, superadmin, user) at offset 13`},
		// Without a declaration nothing is checked.
		{"ip:5/s; exempt:superadmn; role(admn)=ip:30/min", nil, ""},
	}
	for _, s := range steps {
		t.Run(s.text, func(t *testing.T) {
			t.Parallel()
			err := checkRoles(rules.MustParse(s.text), s.declared)
			switch {
			case s.want == "" && err != nil:
				t.Fatalf("got %v, want nil", err)
			case s.want == "":
				return
			case err == nil:
				t.Fatalf("got nil, want %s", s.want)
			case err.Error() != s.want:
				t.Errorf("got  %s\nwant %s", err, s.want)
			}
			if re, ok := err.(*rules.Error); !ok || re.Syntax {
				t.Errorf("%v is not an invalid-rule *rules.Error", err)
			}
		})
	}
}

// TestCheckRolesRelocate: Relocate points CheckRoles's error into the text
// as written, and leaves an error of another text, or one already located
// in its text, as it is.
func TestCheckRolesRelocate(t *testing.T) {
	t.Parallel()
	declared := []string{"admin"}
	tests := []struct {
		text   string
		offset int // in text
	}{
		{"ip:5/min; count:401; exempt:admn", 28},
		{"exempt:admn; ip:5/min", 7},
		{"ip:5/min;exempt:admin , admn;count:4xx", 24},
		{"count:401; role(admn)=ip:1/s; ip:5/min", 16},
	}
	for _, tt := range tests {
		t.Run(tt.text, func(t *testing.T) {
			t.Parallel()
			var e *rules.Error
			if !errors.As(checkRoles(rules.MustParse(tt.text), declared), &e) {
				t.Fatal("no *rules.Error")
			}
			r, ok := lifecycle.Relocate(e, tt.text).(*rules.Error)
			if !ok || r.Input != tt.text || r.Offset != tt.offset || r.Reason != e.Reason || r.Syntax {
				t.Fatalf("relocated to %v, want offset %d of %q", r, tt.offset, tt.text)
			}
			if lifecycle.Relocate(r, "ip:1/s; exempt:admin") != error(r) {
				t.Error("a located error moved")
			}
			if lifecycle.Relocate(e, "ip:1/s; exempt:other") != error(e) {
				t.Error("an error moved into a text without its role")
			}
		})
	}
}
