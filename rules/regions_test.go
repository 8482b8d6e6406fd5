package rules

import (
	"errors"
	"reflect"
	"testing"
)

func TestRegionsParse(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in        string
		canonical string
		regional  bool
	}{
		{"ip:5/s; regions:local", "ip:5/s; regions:local", true},
		{" regions : local ; ip:5/s", "ip:5/s; regions:local", true},
		{"regions:local; user:3 concurrent; fail:local; distinct:path; block:1m", "user:3 concurrent; fail:local; block:min; distinct:path; regions:local", true},
		{"exempt:ops; regions:local;", "exempt:ops; regions:local", true},
		{"ip:5/s", "ip:5/s", false},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			t.Parallel()
			g, err := Parse(tt.in)
			if err != nil {
				t.Fatal(err)
			}
			if g.Regional != tt.regional {
				t.Errorf("Regional = %v, want %v", g.Regional, tt.regional)
			}
			if got := g.String(); got != tt.canonical {
				t.Errorf("String() = %q, want %q", got, tt.canonical)
			}
			g2, err := Parse(g.String())
			if err != nil || !reflect.DeepEqual(g, g2) {
				t.Errorf("round trip through %q: %#v, %v", g.String(), g2, err)
			}
			if err := g.Validate(); err != nil {
				t.Errorf("Validate: %v", err)
			}
		})
	}
}

// TestRegionsChangesNothingElse checks that the statement sets Regional
// and no other field of the group.
func TestRegionsChangesNothingElse(t *testing.T) {
	t.Parallel()
	const base = "ip:5/s,100/min; role(a)=user:1 concurrent; exempt:b; count:4xx; scope:s; fail:local; block:1h"
	plain := MustParse(base)
	regional := MustParse(base + "; regions:local")
	if plain.Regional || !regional.Regional {
		t.Fatalf("Regional: %v without the statement, %v with it", plain.Regional, regional.Regional)
	}
	regional.Regional = false
	if !reflect.DeepEqual(plain, regional) {
		t.Errorf("regions:local changed more than Regional:\n got %#v\nwant %#v", regional, plain)
	}
}

func TestRegionsHandBuilt(t *testing.T) {
	t.Parallel()
	g := Group{Rules: []Rule{lim(IP, "", win(5, sec))}, Regional: true}
	if err := g.Validate(); err != nil {
		t.Fatal(err)
	}
	if got, want := g.String(), "ip:5/s; regions:local"; got != want {
		t.Errorf("String() = %q, want %q", got, want)
	}
}

func TestRegionsErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in   string
		kind error
		want string
	}{
		{"ip:1/s; regions:global", errSyntax, `rules: "ip:1/s; regions:global": region scope "global" is the default and is not written; want local at offset 16`},
		{"ip:1/s; regions:eu", errSyntax, `rules: "ip:1/s; regions:eu": unknown region scope "eu"; want local at offset 16`},
		{"ip:1/s; regions: Local", errSyntax, `rules: "ip:1/s; regions: Local": unknown region scope "Local"; want local at offset 17`},
		{"ip:1/s; regions:", errSyntax, `rules: "ip:1/s; regions:": expected a region scope after "regions:", found end of input at offset 16`},
		{"ip:1/s; regions local", errSyntax, `rules: "ip:1/s; regions local": expected ":" after "regions", found "l" at offset 16`},
		{"ip:1/s; regions:local,eu", errSyntax, `rules: "ip:1/s; regions:local,eu": expected ";", found "," at offset 21`},
		{"ip:1/s; regions:local; regions:local", errInvalid, `rules: "ip:1/s; regions:local; regions:local": duplicate regions statement at offset 23`},
		{"regions:local", errInvalid, ``},
		{"ip:1/s; region:local", errSyntax, `rules: "ip:1/s; region:local": unknown kind or keyword "region" at offset 8`},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			t.Parallel()
			g, err := Parse(tt.in)
			if err == nil {
				t.Fatalf("Parse = %v, want an error", g)
			}
			var e *Error
			if !errors.As(err, &e) {
				t.Fatalf("error %T, want *Error", err)
			}
			if got := kindOf(err); got != tt.kind {
				t.Errorf("kind %v, want %v (%v)", got, tt.kind, err)
			}
			if tt.want != "" && err.Error() != tt.want {
				t.Errorf("error\n got %s\nwant %s", err, tt.want)
			}
		})
	}
}
