package rules

import (
	"errors"
	"reflect"
	"testing"
)

// TestShareParse: share(CLASS):P% statements parse into Group.Shares in
// declaration order, print back canonically after every other statement,
// and round-trip.
func TestShareParse(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in        string
		canonical string
		shares    []Share
	}{
		{"global:20/s; share(critical):30%", "global:20/s; share(critical):30%", []Share{{"critical", 30}}},
		{" share ( b ) : 70 % ; global:20/s;share(a):30%;", "global:20/s; share(b):70%; share(a):30%", []Share{{"b", 70}, {"a", 30}}},
		{"share(x.y-z_1):100%; key(k):5/s; fail:local", "key(k):5/s; fail:local; share(x.y-z_1):100%", []Share{{"x.y-z_1", 100}}},
		{"global:1/s; share(a):1%", "global:1/s; share(a):1%", []Share{{"a", 1}}},
		{"global:1/s; share(a):007%", "global:1/s; share(a):7%", []Share{{"a", 7}}},
		{"global:1/s", "global:1/s", nil},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			t.Parallel()
			g, err := Parse(tt.in)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(g.Shares, tt.shares) {
				t.Errorf("Shares = %v, want %v", g.Shares, tt.shares)
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

// TestShareErrors: each malformed or invalid share statement is an *Error
// at the offending token, syntax or not as the grammar says.
func TestShareErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in     string
		offset int
		syntax bool
		reason string
	}{
		{"global:1/s; share:5%", 17, true, `expected "(" after "share", found ":"`},
		{"global:1/s; share()%", 18, true, `expected a class name, found ")"`},
		{"global:1/s; share(a b):5%", 20, true, `expected ")" after the class name, found "b"`},
		{"global:1/s; share(a)5%", 20, true, `expected ":" after "share(a)", found "5"`},
		{"global:1/s; share(a):%", 21, true, `expected a percent such as 30%, found "%"`},
		{"global:1/s; share(a):5", 22, true, `expected "%" after the percent, found end of input`},
		{"global:1/s; share(a):5.5%", 22, true, `expected "%" after the percent, found "."`},
		{"global:1/s; share(a):0%", 21, false, "share 0% is below 1%"},
		{"global:1/s; share(a):101%", 21, false, "share 101% is above 100%"},
		{"global:1/s; share(a):99999999999999999999%", 21, false, "share 99999999999999999999% is above 100%"},
		{"global:1/s; share(a!):5%", 18, false, `invalid class name "a!"; want letters, digits, "_", "-" or "."`},
		{"global:1/s; share(a):60%; share(a):5%", 32, false, "duplicate share(a)"},
		{"global:1/s; share(a):60%; share(b):40%; share(c):1%", 49, false, "shares add up to 101%, above 100%"},
		{"share(a):50%; global:1/s; share(b):51%", 35, false, "shares add up to 101%, above 100%"},
		{"share(a):50%", 0, false, "rule group has no rules"},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			t.Parallel()
			_, err := Parse(tt.in)
			var e *Error
			if !errors.As(err, &e) {
				t.Fatalf("Parse = %v, want an *Error", err)
			}
			if e.Offset != tt.offset || e.Syntax != tt.syntax || e.Reason != tt.reason {
				t.Errorf("got offset %d, syntax %v, reason %q; want %d, %v, %q", e.Offset, e.Syntax, e.Reason, tt.offset, tt.syntax, tt.reason)
			}
		})
	}
}

// TestShareValidate: a hand-built group's shares are checked as parsed
// ones are, the error pointing into its canonical text.
func TestShareValidate(t *testing.T) {
	t.Parallel()
	g := MustParse("global:1/s")
	for _, tt := range []struct {
		shares []Share
		reason string
	}{
		{[]Share{{"", 5}}, "missing class name in share(CLASS)"},
		{[]Share{{"a", 0}}, "share 0% is below 1%"},
		{[]Share{{"a", 101}}, "share 101% is above 100%"},
		{[]Share{{"a", 70}, {"b", 31}}, "shares add up to 101%, above 100%"},
		{[]Share{{"a", 1}, {"a", 1}}, "duplicate share(a)"},
	} {
		g.Shares = tt.shares
		var e *Error
		if err := g.Validate(); !errors.As(err, &e) || e.Reason != tt.reason {
			t.Errorf("Validate of %v = %v, want reason %q", tt.shares, err, tt.reason)
		}
	}
	g.Shares = []Share{{"a", 60}, {"b", 40}}
	if err := g.Validate(); err != nil {
		t.Errorf("Validate of shares adding up to 100%%: %v", err)
	}
}
