package rules

import (
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/slidelimit/slidelimit/internal/rulelimits"
)

// windows returns n windows "1/1ms,1/2ms,...", each of its own period.
func windows(n, from int) string {
	ws := make([]string, n)
	for i := range ws {
		ws[i] = "1/" + strconv.Itoa(from+i+1) + "ms"
	}
	return strings.Join(ws, ",")
}

// keyRules returns n rules key(k0)..., each with per windows,
// separated by sep: "; " for statements, " & " in role rules.
func keyRules(n, per int, sep string) string {
	ls := make([]string, n)
	for i := range ls {
		ls[i] = "key(k" + strconv.Itoa(i) + "):" + windows(per, 0)
	}
	return strings.Join(ls, sep)
}

// TestParseSize checks that a rule list with more rules or windows
// than the engine takes in one request fails Parse, naming the bound and
// the count, at the first rule or window beyond the bound; and that a
// list at the bounds parses.
func TestParseSize(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		text string
		want string // empty for a valid group
		at   string // the text the error's offset points at
	}{
		{"windows at the bound", "ip:" + windows(rulelimits.MaxWindows, 0), "", ""},
		{"rules at the bound", keyRules(rulelimits.MaxRules, rulelimits.MaxWindows/rulelimits.MaxRules, "; "), "", ""},
		{"one rule with 300 windows", "ip:" + windows(300, 0),
			"group has 300 windows, at most 256", "1/257ms,"},
		{"windows across rules", keyRules(9, 30, "; "),
			"group has 270 windows, at most 256", "1/17ms,1/18ms"},
		{"65 rules", keyRules(65, 1, "; "),
			"group has 65 rules, at most 64", "key(k64):"},
		{"an role's windows", "ip:1/s; role(admin)=user:" + windows(257, 0),
			"role(admin)= has 257 windows, at most 256", "1/257ms"},
		{"an role's rules", "ip:1/s; role(admin)=" + keyRules(70, 1, " & "),
			"role(admin)= has 70 rules, at most 64", "key(k64):"},
		// Each list is a request of its own: the defaults and a
		// role's rules together may exceed the bound.
		{"lists apart", "ip:" + windows(200, 0) + "; role(admin)=user:" + windows(200, 0), "", ""},
		{"distinct at the bound", "user:1 concurrent," + windows(rulelimits.MaxDistinctWindows, 0) + "; distinct:path", "", ""},
		{"distinct beyond", "user:" + windows(31, 0) + "; user[bytes]:" + windows(40, 0) + "; distinct:path",
			"rule user counts distinct values (distinct:) in 31 windows, at most 30", "1/31ms"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := Parse(tt.text)
			if tt.want == "" {
				if err != nil {
					t.Fatalf("Parse: %v", err)
				}
				return
			}
			var e *Error
			if !errors.As(err, &e) || kindOf(err) != errInvalid || !strings.Contains(e.Reason, tt.want) {
				t.Fatalf("Parse = %v, want an invalid-rule *Error saying %q", err, tt.want)
			}
			if !strings.HasPrefix(tt.text[e.Offset:], tt.at) {
				t.Errorf("offset %d points at %.20q, want %q", e.Offset, tt.text[e.Offset:], tt.at)
			}
		})
	}
}

// TestValidateSize checks the size bounds on a group built in Go, which
// the middleware validates.
func TestValidateSize(t *testing.T) {
	t.Parallel()
	ws := make([]Window, 300)
	for i := range ws {
		ws[i] = win(1, sec*time.Duration(i+1))
	}
	g := Group{Rules: []Rule{{Kind: IP, Windows: ws}}}
	err := g.Validate()
	if err == nil || kindOf(err) != errInvalid || !strings.Contains(err.Error(), "group has 300 windows, at most 256") {
		t.Fatalf("Validate = %v", err)
	}
	g.Rules[0].Windows = ws[:rulelimits.MaxWindows]
	if err := g.Validate(); err != nil {
		t.Fatalf("Validate at the bound: %v", err)
	}
}
