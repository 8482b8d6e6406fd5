package rules_test

import (
	"errors"
	"testing"

	"github.com/slidelimit/slidelimit/rules"
)

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
		// Overrides print before exempt:, so the override is first in the text.
		{"exempt:superadmn; role(admn)=ip:30/min", declared, `rules: "role(admn)=ip:30/min; exempt:superadmn": role "admn" is not declared (declared roles: admin, superadmin, user) at offset 5`},
		{"exempt:admin,ops", declared, `rules: "exempt:admin,ops": role "ops" is not declared (declared roles: admin, superadmin, user) at offset 13`},
		// Without a declaration nothing is checked.
		{"ip:5/s; exempt:superadmn; role(admn)=ip:30/min", nil, ""},
	}
	for _, s := range steps {
		t.Run(s.text, func(t *testing.T) {
			t.Parallel()
			err := rules.MustParse(s.text).CheckRoles(s.declared)
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
			if !errors.Is(err, rules.ErrInvalid) {
				t.Errorf("%v does not wrap ErrInvalid", err)
			}
		})
	}
}
