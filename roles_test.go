package slidelimit_test

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/slidelimit/slidelimit"
	"github.com/slidelimit/slidelimit/middleware"
	"github.com/slidelimit/slidelimit/role"
	"github.com/slidelimit/slidelimit/rules"
)

// declared is a policy that declares the roles of the tests below.
var declared = role.Policy{Roles: []role.Role{"user", "admin", "superadmin"}}

// TestDeclaredRoles checks that every way (struct tags: below) of giving the Limiter a rule
// group refuses a role the policy does not declare, naming it, its
// position and the declared roles, and accepts the declared ones.
func TestDeclaredRoles(t *testing.T) {
	t.Parallel()
	const good = "ip:5/s; exempt:superadmin; role(admin)=ip:30/min"
	steps := []struct {
		name, text, bad string
	}{
		{"exempt", "ip:5/s; exempt:superadmn; role(admin)=ip:30/min", "superadmn"},
		{"role rules", "ip:5/s; exempt:superadmin; role(admn)=ip:30/min", "admn"},
		{"both, first in text", "exempt:superadmn; role(admn)=ip:30/min", "admn"},
	}
	type register func(lim *slidelimit.Limiter, text string) error
	ways := map[string]register{
		"Handle": func(lim *slidelimit.Limiter, text string) error {
			return lim.Handle(http.NewServeMux(), "GET /files/{id}", ok, text)
		},
		"Middleware": func(lim *slidelimit.Limiter, text string) error {
			_, err := lim.Middleware(text)
			return err
		},
		"SetRules": func(lim *slidelimit.Limiter, text string) error {
			if err := lim.Handle(http.NewServeMux(), "GET /search", ok, "ip:100/min"); err != nil {
				return err
			}
			return lim.SetRules(context.Background(), "GET /search", text)
		},
	}
	for way, reg := range ways {
		for _, s := range steps {
			t.Run(way+"/"+s.name, func(t *testing.T) {
				t.Parallel()
				lim := onMiniredis(t, slidelimit.WithMiddlewareOptions(middleware.WithPolicy(declared)))
				err := reg(lim, s.text)
				checkUndeclared(t, err, s.bad)
				if err := reg(onMiniredis(t, slidelimit.WithMiddlewareOptions(middleware.WithPolicy(declared))), good); err != nil {
					t.Errorf("declared roles refused: %v", err)
				}
				// Without a declaration, names are not checked.
				if err := reg(onMiniredis(t), s.text); err != nil {
					t.Errorf("undeclared policy checked role names: %v", err)
				}
			})
		}
	}
}

func TestDeclaredRolesTags(t *testing.T) {
	t.Parallel()
	type api struct {
		Files http.HandlerFunc `route:"GET /files/{id}" limit:"ip:5/s; exempt:superadmn; role(admin)=ip:30/min"`
	}
	mux := http.NewServeMux()
	lim := offline(t, slidelimit.WithMiddlewareOptions(middleware.WithPolicy(declared)))
	err := lim.Register(mux, &api{Files: ok})
	checkUndeclared(t, err, "superadmn")
	if err == nil || !strings.Contains(err.Error(), "field Files") {
		t.Errorf("error does not name the field: %v", err)
	}
	if registered(mux, "GET", "/files/1") {
		t.Error("a route was registered despite the error")
	}
	type good struct {
		Files http.HandlerFunc `route:"GET /files/{id}" limit:"ip:5/s; exempt:superadmin; role(admin)=ip:30/min"`
	}
	if err := lim.Register(mux, &good{Files: ok}); err != nil {
		t.Errorf("declared roles refused: %v", err)
	}
}

// checkUndeclared checks that err is a *rules.Error naming role bad at
// its offset, with the declared roles listed.
func checkUndeclared(t *testing.T, err error, bad string) {
	t.Helper()
	var re *rules.Error
	if !errors.As(err, &re) {
		t.Fatalf("got %v, want a *rules.Error", err)
	}
	if !isError(err, errRuleInvalid) {
		t.Errorf("%v does not wrap errRuleInvalid", err)
	}
	if re.Offset < 0 || !strings.HasPrefix(re.Input[re.Offset:], bad) {
		t.Errorf("offset %d of %q does not point at %q", re.Offset, re.Input, bad)
	}
	for _, want := range []string{`"` + bad + `"`, "admin, superadmin, user"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not contain %s", err, want)
		}
	}
}

// onMiniredis returns a Limiter on a fresh miniredis.
func onMiniredis(t *testing.T, opts ...slidelimit.Option) *slidelimit.Limiter {
	t.Helper()
	mr := miniredis.RunT(t)
	c := redis.NewClient(&redis.Options{Addr: mr.Addr(), ContextTimeoutEnabled: true})
	t.Cleanup(func() { c.Close() })
	lim, err := slidelimit.New(c, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lim.Close() })
	return lim
}
