package middleware_test

import (
	"errors"
	"net/http"
	"strings"
	"testing"

	"github.com/slidelimit/slidelimit/internal/lifecycle"
	"github.com/slidelimit/slidelimit/internal/testutil"
	"github.com/slidelimit/slidelimit/middleware"
	"github.com/slidelimit/slidelimit/rules"
)

// TestSubjectMatchesServing checks that Subject gives, for the raw value,
// exactly the subject the middleware sends to the decider while serving.
func TestSubjectMatchesServing(t *testing.T) {
	t.Parallel()
	tenant := middleware.WithKeyFunc("tenant", func(r *http.Request) string { return r.URL.Query().Get("tenant") })
	tests := []struct {
		name   string
		group  string
		kind   rules.Kind
		value  string
		target string
		remote string
		header string // X-Api-Key
		who    string // user id, "" for anonymous
		opts   []middleware.Option
	}{
		{"ipv4", "ip:5/s", rules.IP, "192.0.2.7", "/x/1", "192.0.2.7:1234", "", "", nil},
		{"ipv4-mapped ipv6", "ip:5/s", rules.IP, "::ffff:192.0.2.7", "/x/1", "[::ffff:192.0.2.7]:1234", "", "", nil},
		{"ipv6 grouped by /64", "ip:5/s", rules.IP, "2001:db8:1:2::99", "/x/1", "[2001:db8:1:2:aa::1]:1234", "", "", nil},
		{"ipv6 network as in logs", "ip:5/s", rules.IP, "2001:db8:1:2::/64", "/x/1", "[2001:db8:1:2::1]:1", "", "", nil},
		{"ipv6 grouped by /48", "ip:5/s", rules.IP, "2001:db8:1::7", "/x/1", "[2001:db8:1:ffff::1]:1", "", "",
			[]middleware.Option{middleware.WithIPv6Prefix(48)}},
		{"user", "user:5/s", rules.User, "alice", "/x/1", "192.0.2.7:1", "", "alice", nil},
		{"user id spelling an ip", "user:5/s", rules.User, "ip:192.0.2.7", "/x/1", "192.0.2.7:1", "", "ip:192.0.2.7", nil},
		{"user counted by ip is the ip subject", "user:5/s", rules.IP, "192.0.2.7", "/x/1", "192.0.2.7:1", "", "", nil},
		{"header", "header(X-Api-Key):5/s", rules.Header, "k1", "/x/1", "192.0.2.7:1", "k1", "", nil},
		{"param", "param(id):5/s", rules.Param, "42", "/x/42", "192.0.2.7:1", "", "", nil},
		{"key", "key(tenant):5/s", rules.Key, "acme", "/x/1?tenant=acme", "192.0.2.7:1", "", "", nil},
		{"global", "global:5/s", rules.Global, "", "/x/1", "192.0.2.7:1", "", "", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			mem := newMem()
			opts := append([]middleware.Option{tenant}, tt.opts...)
			mux := routed(t, "GET /x/{id}", tt.group, mem, opts...)
			r := request("GET", tt.target, tt.remote, nil)
			if tt.who != "" {
				r = request("GET", tt.target, tt.remote, user(tt.who))
			}
			if tt.header != "" {
				r.Header.Set("X-Api-Key", tt.header)
			}
			if got := do(mux, r).Code; got != ok {
				t.Fatalf("status %d", got)
			}
			reqs := mem.requests()
			if len(reqs) != 1 || len(reqs[0].Checks) != 1 {
				t.Fatalf("requests = %+v, want one with one check", reqs)
			}
			got, err := subjectOf(tt.kind, tt.value, opts...)
			if err != nil {
				t.Fatal(err)
			}
			if want := reqs[0].Checks[0].Subject; got != want {
				t.Errorf("Subject(%s, %q) = %q, the middleware counted %q", tt.kind, tt.value, got, want)
			}
		})
	}
}

func TestSubjectErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		kind  rules.Kind
		value string
		opts  []middleware.Option
		want  error
		text  string
	}{
		{rules.IP, "localhost", nil, lifecycle.ErrSubject, `"localhost" is not an IP address`},
		{rules.IP, "", nil, lifecycle.ErrSubject, `"" is not an IP address`},
		{rules.IP, "192.0.2.0/24", nil, lifecycle.ErrSubject, "IPv6 /64 network"},
		{rules.IP, "2001:db8::/48", nil, lifecycle.ErrSubject, "IPv6 /64 network"},
		{rules.User, "", nil, lifecycle.ErrSubject, "empty user value"},
		{rules.Header, "", nil, lifecycle.ErrSubject, "empty header value"},
		{rules.Kind("cookie"), "x", nil, lifecycle.ErrSubject, `unknown limiter kind "cookie"`},
		{rules.IP, "192.0.2.7", []middleware.Option{middleware.WithIPv6Prefix(0)}, nil, "WithIPv6Prefix"},
	}
	for _, tt := range tests {
		got, err := subjectOf(tt.kind, tt.value, tt.opts...)
		if tt.want == nil && testutil.ConfigError(err, "option", "WithIPv6Prefix") == nil || tt.want != nil && !errors.Is(err, tt.want) ||
			!strings.Contains(err.Error(), tt.text) || !strings.HasPrefix(err.Error(), "middleware: ") {
			t.Errorf("Subject(%s, %q) = %q, %v; want an error matching %v containing %q", tt.kind, tt.value, got, err, tt.want, tt.text)
		}
	}
}

// subjectOf is the middleware's mapping of values to subjects, as the root
// package's Peek and Reset reach it.
func subjectOf(kind rules.Kind, value string, opts ...middleware.Option) (string, error) {
	return middleware.Subject(kind, value, opts...)
}
