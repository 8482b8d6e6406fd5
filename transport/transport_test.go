package transport_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/slidelimit/slidelimit/engine"
	"github.com/slidelimit/slidelimit/middleware"
	"github.com/slidelimit/slidelimit/role"
	"github.com/slidelimit/slidelimit/rules"
	"github.com/slidelimit/slidelimit/transport"
)

// allowAll admits every request and cannot finish one.
type allowAll struct{}

func (allowAll) Allow(context.Context, engine.Request) (engine.Decision, error) {
	return engine.Decision{Allowed: true}, nil
}

// TestNewTakesSharedOptions: New configures a transport with the
// middleware options every transport shares, reports their mistakes and
// net/http's own options as *middleware.ConfigError values, and Compile
// applies the WithPolicy policy and refuses a group it cannot finish.
func TestNewTakesSharedOptions(t *testing.T) {
	t.Parallel()
	_, err := transport.New(allowAll{}, "call", middleware.WithTrustedProxies("bogus"), middleware.WithScope("s"))
	var kinds []string
	for _, e := range err.(interface{ Unwrap() []error }).Unwrap() {
		var ce *middleware.ConfigError
		if !errors.As(e, &ce) {
			t.Fatalf("error %v is not a *middleware.ConfigError", e)
		}
		kinds = append(kinds, ce.Kind+" "+ce.Option)
	}
	if got := strings.Join(kinds, ", "); got != "option WithTrustedProxies, transport WithScope" {
		t.Errorf("New errors: %s (%v)", got, err)
	}

	tr, err := transport.New(allowAll{}, "call", middleware.WithTrustedProxies("10.0.0.0/8"), middleware.WithIPv6Prefix(48),
		middleware.WithPolicy(role.Policy{Roles: []role.Role{"admin"}}))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tr.Compile(rules.MustParse("ip:5/s; exempt:admin"), nil); err != nil {
		t.Errorf("Compile with a declared role: %v", err)
	}
	if _, err := tr.Compile(rules.MustParse("ip:5/s; exempt:admn"), nil); !errors.As(err, new(*rules.Error)) {
		t.Errorf("Compile with an undeclared role: %v, want a *rules.Error", err)
	}
	// Parse points into the text as written, not the canonical text.
	_, err = tr.Parse("ip:5/min; count:401; exempt:admn", nil, nil)
	if re := (*rules.Error)(nil); !errors.As(err, &re) || re.Offset != 28 || re.Syntax {
		t.Errorf("Parse with an undeclared role: %v, want a *rules.Error at offset 28", err)
	}
	if _, err := (*transport.Transport)(nil).Parse("ip:5/s; exempt:admn", nil, nil); err != nil {
		t.Errorf("Parse on a nil Transport checks no roles, got %v", err)
	}
	_, err = tr.Compile(rules.MustParse("ip:5/s, 1 concurrent"), nil)
	if ce := (*middleware.ConfigError)(nil); !errors.As(err, &ce) || ce.Kind != "decider" {
		t.Errorf("Compile of an in-flight window without a finish: %v, want a ConfigError of the decider", err)
	}
}
