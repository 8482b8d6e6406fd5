package role_test

import (
	"context"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/slidelimit/slidelimit/role"
	"github.com/slidelimit/slidelimit/rules"
)

func lim(k rules.Kind, limit int64, period time.Duration) rules.Rule {
	return rules.Rule{Kind: k, Windows: []rules.Window{{Limit: limit, Period: period}}}
}

// files is the demo's download group:
// user:10/min; ip:30/min; exempt:superadmin; role(admin)=ip:30/min & global:1000/h; role(ops)=ip:5/min
var files = rules.Group{
	Rules: []rules.Rule{lim(rules.User, 10, time.Minute), lim(rules.IP, 30, time.Minute)},
	RoleRules: []rules.RoleRules{
		{Role: "admin", Rules: []rules.Rule{lim(rules.IP, 30, time.Minute), lim(rules.Global, 1000, time.Hour)}},
		{Role: "ops", Rules: []rules.Rule{lim(rules.IP, 5, time.Minute)}},
	},
	Exempt: []string{"superadmin"},
}

func TestResolve(t *testing.T) {
	t.Parallel()
	shared := role.Policy{ByIP: []role.Role{"admin", "support"}}
	tests := []struct {
		name   string
		policy role.Policy
		group  rules.Group
		id     role.Identity
		want   role.Resolution
	}{
		{"anonymous gets defaults", role.Policy{}, files, role.Identity{},
			role.Resolution{Rules: files.Rules}},
		{"plain user gets defaults", shared, files, role.Identity{User: "alice", Roles: []role.Role{"user"}},
			role.Resolution{Rules: files.Rules}},
		{"exempt role", shared, files, role.Identity{User: "root", Roles: []role.Role{"superadmin"}},
			role.Resolution{Exempt: true}},
		{"exemption beats role rules", shared, files, role.Identity{User: "x", Roles: []role.Role{"admin", "superadmin"}},
			role.Resolution{Exempt: true}},
		{"role rules replace defaults", role.Policy{}, files, role.Identity{User: "a", Roles: []role.Role{"admin"}},
			role.Resolution{Role: "admin", Rules: files.RoleRules[0].Rules}},
		{"first role rules in declaration order win", role.Policy{}, files, role.Identity{User: "a", Roles: []role.Role{"ops", "admin"}},
			role.Resolution{Role: "admin", Rules: files.RoleRules[0].Rules}},
		{"route's role rules beat service-wide by-ip", shared, files, role.Identity{User: "a", Roles: []role.Role{"admin"}},
			role.Resolution{Role: "admin", Rules: files.RoleRules[0].Rules}},
		{"service-wide by-ip without route's role rules", shared, rules.Group{Rules: files.Rules},
			role.Identity{User: "a", Roles: []role.Role{"admin"}},
			role.Resolution{Rules: files.Rules, ByIP: true}},
		{"by-ip role listed second", shared, rules.Group{Rules: files.Rules},
			role.Identity{User: "s", Roles: []role.Role{"user", "support"}},
			role.Resolution{Rules: files.Rules, ByIP: true}},
		{"shared account with another role's rules stays by-ip", shared, files,
			role.Identity{User: "a", Roles: []role.Role{"ops", "support"}},
			role.Resolution{Role: "ops", Rules: files.RoleRules[1].Rules, ByIP: true}},
		{"a second shared role still counts by ip", shared, files,
			role.Identity{User: "a", Roles: []role.Role{"admin", "support"}},
			role.Resolution{Role: "admin", Rules: files.RoleRules[0].Rules, ByIP: true}},
		{"only-exempt group", shared, rules.Group{Exempt: []string{"ops"}}, role.Identity{User: "a"},
			role.Resolution{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got := tt.policy.Resolve(tt.group, tt.id)
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("Resolve(%+v) = %+v, want %+v", tt.id, got, tt.want)
			}
		})
	}
}

func TestContext(t *testing.T) {
	t.Parallel()
	if _, ok := role.FromContext(context.Background()); ok {
		t.Fatal("FromContext on an empty context reported an identity")
	}
	want := role.Identity{User: "42", Roles: []role.Role{"admin"}}
	got, ok := role.FromContext(role.NewContext(context.Background(), want))
	if !ok || !reflect.DeepEqual(got, want) {
		t.Fatalf("FromContext = %+v, %v; want %+v, true", got, ok, want)
	}
}

func TestResolveDoesNotAllocate(t *testing.T) {
	p := role.Policy{ByIP: []role.Role{"admin"}}
	id := role.Identity{User: "a", Roles: []role.Role{"user", "admin"}}
	if n := testing.AllocsPerRun(100, func() { p.Resolve(files, id) }); n != 0 {
		t.Fatalf("Resolve allocates %v times per call", n)
	}
}

func TestPolicyCheck(t *testing.T) {
	t.Parallel()
	g := rules.MustParse("ip:5/s; exempt:superadmn; role(admin)=ip:30/min")
	if err := (role.Policy{}).Check(g); err != nil {
		t.Errorf("a policy without declared roles checked names: %v", err)
	}
	p := role.Policy{Roles: []role.Role{"admin", "superadmin"}}
	err := p.Check(g)
	if err == nil || !strings.Contains(err.Error(), `role "superadmn" is not declared (declared roles: admin, superadmin)`) {
		t.Errorf("got %v", err)
	}
	if err := p.Check(rules.MustParse("ip:5/s; exempt:superadmin; role(admin)=ip:30/min")); err != nil {
		t.Errorf("declared roles refused: %v", err)
	}
}
