package slidelimit_test

import (
	"errors"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/slidelimit/slidelimit"
	"github.com/slidelimit/slidelimit/internal/redistest"
	"github.com/slidelimit/slidelimit/middleware"
	"github.com/slidelimit/slidelimit/role"
	"github.com/slidelimit/slidelimit/rules"
)

// writtenTag is the tag of issue 41, whose undeclared role used to be
// reported at offset 17 of "ip:5/min; exempt:admn; count:401".
type writtenTag struct {
	F http.HandlerFunc `route:"GET /x" limit:"ip:5/min; count:401; exempt:admn"`
}

// TestErrorOffsetsAsWritten checks that an undeclared role is reported at
// its offset in the rule text as the user wrote it, by Register, Handle,
// Middleware and SetRules, however the statements are ordered.
func TestErrorOffsetsAsWritten(t *testing.T) {
	t.Parallel()
	_, client := redistest.Mini(t)
	lim, err := slidelimit.New(client, slidelimit.WithMiddlewareOptions(
		middleware.WithPolicy(role.Policy{Roles: []role.Role{"admin", "premium"}})))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lim.Close() })
	if err := lim.Handle(http.NewServeMux(), "GET /s", ok, "ip:5/min"); err != nil {
		t.Fatal(err)
	}
	// check reports whether err locates role in text at offset.
	check := func(t *testing.T, err error, text, role string, offset int) {
		t.Helper()
		var re *rules.Error
		if !errors.As(err, &re) {
			t.Fatalf("error %v has no *rules.Error", err)
		}
		if re.Input != text || re.Offset != offset {
			t.Errorf("error points at %d of %q, want %d of %q", re.Offset, re.Input, offset, text)
		}
		if !strings.HasPrefix(text[offset:], role) {
			t.Errorf("offset %d of %q is not at role %q", offset, text, role)
		}
		if want := strconv.Quote(text) + `: role "` + role + `" is not declared`; !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not contain %q", err, want)
		}
	}
	t.Run("tag", func(t *testing.T) {
		err := lim.Register(http.NewServeMux(), &writtenTag{ok})
		check(t, err, "ip:5/min; count:401; exempt:admn", "admn", 28)
	})
	tests := []struct {
		text, role string
		offset     int
	}{
		{"ip:5/min; count:401; exempt:admn", "admn", 28},
		{"exempt:admn; ip:5/min", "admn", 7},
		{"ip:5/min; mode:shadow; role(premum)=ip:9/min", "premum", 28},
		{"exempt:admin; role(admn)=ip:9/min; ip:5/min", "admn", 19},
		{"block:1m; ip:5/min; exempt:admin,root", "root", 33},
		// Already canonical: the offsets did not move.
		{"ip:5/min; exempt:admn", "admn", 17},
	}
	for _, tt := range tests {
		t.Run(tt.text, func(t *testing.T) {
			err := lim.Handle(http.NewServeMux(), "GET /x", ok, tt.text)
			check(t, err, tt.text, tt.role, tt.offset)
			_, err = lim.Middleware(tt.text)
			check(t, err, tt.text, tt.role, tt.offset)
			err = lim.SetRules(t.Context(), "GET /s", tt.text)
			check(t, err, tt.text, tt.role, tt.offset)
		})
	}
}
