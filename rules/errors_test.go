package rules

import (
	"testing"
)

func TestErrorFormat(t *testing.T) {
	t.Parallel()
	tests := []struct {
		e    *Error
		want string
	}{
		{&Error{Input: "3/fortnight", Offset: 2, Reason: `unknown unit "fortnight"`},
			`rules: "3/fortnight": unknown unit "fortnight" at offset 2`},
		{&Error{Input: "ip:0/s", Offset: 3, Reason: "limit 0 is below 1", Type: "main.Handlers", Field: "Files", Tag: "limit"},
			`rules: main.Handlers.Files: tag limit: "ip:0/s": limit 0 is below 1 at offset 3`},
		{&Error{Offset: -1, Reason: "handler is nil", Type: "main.Handlers", Field: "Files"},
			`rules: main.Handlers.Files: handler is nil`},
		{&Error{Offset: -1, Reason: "nil pointer to struct", Type: "main.Handlers"},
			`rules: main.Handlers: nil pointer to struct`},
		{&Error{Offset: -1, Reason: "empty route tag", Field: "Files", Tag: "route"},
			`rules: Files: tag route: empty route tag`},
	}
	for _, tt := range tests {
		if got := tt.e.Error(); got != tt.want {
			t.Errorf("Error() = %q, want %q", got, tt.want)
		}
	}
}

func TestErrorCategories(t *testing.T) {
	t.Parallel()
	_, err := Parse("ip:5/fortnight")
	if kindOf(err) != errSyntax || kindOf(err) == errInvalid {
		t.Errorf("unknown unit: %v should be errSyntax only", err)
	}
	_, err = Parse("ip:0/s")
	if kindOf(err) != errInvalid || kindOf(err) == errSyntax {
		t.Errorf("zero limit: %v should be errInvalid only", err)
	}
}
