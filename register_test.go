package slidelimit_test

import (
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/slidelimit/slidelimit"
	"github.com/slidelimit/slidelimit/engine"
	"github.com/slidelimit/slidelimit/internal/testutil"
	"github.com/slidelimit/slidelimit/middleware"
)

// offline returns a Limiter whose client points nowhere: New does not contact
// Redis, and registration never needs it.
func offline(t *testing.T, opts ...slidelimit.Option) *slidelimit.Limiter {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	t.Cleanup(func() { c.Close() })
	lim, err := slidelimit.New(c, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lim.Close() })
	return lim
}

// registered reports whether mux has a route for method and path.
func registered(mux *http.ServeMux, method, path string) bool {
	_, pattern := mux.Handler(httptest.NewRequest(method, path, nil))
	return pattern != ""
}

func TestRegisterReportsEveryTagError(t *testing.T) {
	t.Parallel()
	type bad struct {
		Syntax   http.HandlerFunc `route:"GET /a" limit:"ip:5/fortnight"`
		Zero     http.HandlerFunc `route:"GET /b" limit:"ip:0/s"`
		NoRoute  http.HandlerFunc `limit:"ip:5/s"`
		Param    http.HandlerFunc `route:"GET /c/{id}" limit:"param(name):5/s"`
		NilValue http.HandlerFunc `route:"GET /d" limit:"ip:5/s"`
		Good     http.HandlerFunc `route:"GET /e" limit:"ip:5/s"`
	}
	h := &bad{Syntax: ok, Zero: ok, NoRoute: ok, Param: ok, Good: ok}
	mux := http.NewServeMux()
	err := offline(t).Register(mux, h)
	if err == nil {
		t.Fatal("Register accepted bad tags")
	}
	for _, field := range []string{"Syntax", "Zero", "NoRoute", "Param", "NilValue"} {
		if !strings.Contains(err.Error(), field) {
			t.Errorf("error does not name field %s:\n%v", field, err)
		}
	}
	if !isError(err, errRuleSyntax) || !isError(err, errRuleInvalid) {
		t.Errorf("error %v does not wrap both rules categories", err)
	}
	if registered(mux, "GET", "/e") {
		t.Error("a route was registered although Register failed")
	}
}

func TestRegisterReportsEveryRouteError(t *testing.T) {
	t.Parallel()
	type api struct {
		Tenant  http.HandlerFunc `route:"GET /t" limit:"key(tenant):5/s"`
		Org     http.HandlerFunc `route:"GET /o" limit:"ip:5/s; role(staff)=key(org):5/s"`
		Left    http.HandlerFunc `route:"GET /x/{a}" limit:"ip:5/s"`
		Right   http.HandlerFunc `route:"GET /{b}/y" limit:"ip:5/s"`
		Healthy http.HandlerFunc `route:"GET /healthz" limit:"none"`
	}
	h := &api{ok, ok, ok, ok, ok}
	mux := http.NewServeMux()
	err := offline(t).Register(mux, h)
	if !isError(err, unregistered("WithKeyFunc")) || !isKind(err, "route") {
		t.Fatalf("Register = %v, want unknown keys and a pattern conflict", err)
	}
	var fields []string
	for _, e := range err.(interface{ Unwrap() []error }).Unwrap() {
		var re *slidelimit.ConfigError
		if !errors.As(e, &re) {
			t.Errorf("error %v is not a *ConfigError", e)
			continue
		}
		fields = append(fields, re.Field)
	}
	if got := strings.Join(fields, ","); got != "Tenant,Org,Right" {
		t.Errorf("failed fields = %s, want Tenant,Org,Right", got)
	}
	for _, want := range []string{"key(tenant)", "key(org)", "conflicts"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error does not mention %q:\n%v", want, err)
		}
	}
	if registered(mux, "GET", "/healthz") {
		t.Error("a route was registered although Register failed")
	}
	// With the key functions, only the conflict remains.
	lim := offline(t,
		slidelimit.WithMiddlewareOptions(
			middleware.WithKeyFunc("tenant", func(r *http.Request) string { return r.Header.Get("X-Tenant") }),
			middleware.WithKeyFunc("org", func(r *http.Request) string { return "" }),
		))
	err = lim.Register(http.NewServeMux(), h)
	if isError(err, unregistered("WithKeyFunc")) || !isKind(err, "route") {
		t.Errorf("Register = %v, want only the pattern conflict", err)
	}
}

// TestRegisterReportsTagAndRouteErrors checks that the problems found in
// the routes (an unknown key function, a pattern conflict) are reported
// together with the tag errors, not on the next call.
func TestRegisterReportsTagAndRouteErrors(t *testing.T) {
	t.Parallel()
	type api struct {
		Zero   http.HandlerFunc `route:"GET /z" limit:"ip:0/s"`
		Tenant http.HandlerFunc `route:"GET /t" limit:"key(tenant):5/s"`
		Left   http.HandlerFunc `route:"GET /x/{a}" limit:"ip:5/s"`
		Right  http.HandlerFunc `route:"GET /{b}/y" limit:"ip:5/s"`
		Good   http.HandlerFunc `route:"GET /g" limit:"ip:5/s"`
	}
	mux := http.NewServeMux()
	err := offline(t).Register(mux, &api{ok, ok, ok, ok, ok})
	for _, want := range []error{errRuleInvalid, unregistered("WithKeyFunc"), kindErr("route")} {
		if !isError(err, want) {
			t.Errorf("Register = %v, want it to wrap %v", err, want)
		}
	}
	if registered(mux, "GET", "/g") {
		t.Error("a route was registered although Register failed")
	}
}

func TestRegisterConflictWithExistingRoute(t *testing.T) {
	t.Parallel()
	mux := http.NewServeMux()
	mux.Handle("GET /files/{name}", ok)
	type api struct {
		Files http.HandlerFunc `route:"GET /files/{id}" limit:"ip:5/s"`
	}
	err := offline(t).Register(mux, &api{ok})
	var re *slidelimit.ConfigError
	if !errors.As(err, &re) || re.Field != "Files" || !isKind(err, "route") {
		t.Errorf("Register = %v, want a *ConfigError for Files of kind route", err)
	}
}

func TestRegisterArguments(t *testing.T) {
	t.Parallel()
	lim := offline(t)
	var ce *slidelimit.ConfigError
	if err := lim.Register(nil, struct{}{}); !errors.As(err, &ce) || !strings.Contains(err.Error(), "nil mux") {
		t.Errorf("nil mux: %v", err)
	}
	for _, v := range []any{nil, 42, (*struct{})(nil)} {
		if err := lim.Register(http.NewServeMux(), v); !isError(err, errRuleInvalid) || !errors.As(err, &ce) {
			t.Errorf("Register(%#v) = %v, want errRuleInvalid", v, err)
		}
	}
	if err := lim.Register(http.NewServeMux(), struct{}{}); err != nil {
		t.Errorf("empty struct: %v", err)
	}
}

func TestHandle(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, pattern, rules string
		handler              http.Handler
		want                 error // nil: the text of the error holds msg
		msg                  string
	}{
		{"ok", "GET /files/{id}", "param(id):5/s; ip:10/s", ok, nil, ""},
		{"rules syntax", "GET /a", "ip:5/fortnight", ok, errRuleSyntax, ""},
		{"empty rules", "GET /a", "", ok, errRuleSyntax, ""},
		{"invalid pattern", "GET /{", "ip:5/s", ok, kindErr("route"), ""},
		{"duplicate pattern", "GET /taken", "ip:5/s", ok, kindErr("route"), ""},
		{"param without wildcard", "GET /a/{id}", "param(name):5/s", ok, errRuleInvalid, ""},
		{"param in role rules", "GET /a/{id}", "ip:5/s; role(x)=param(other):1/s", ok, errRuleInvalid, ""},
		{"unknown key", "GET /a", "key(k):5/s", ok, unregistered("WithKeyFunc"), ""},
		{"unknown cost", "GET /a", "user[tokens]:5k/d", ok, unregistered("WithCostFunc"), ""},
		{"nil handler", "GET /a", "ip:5/s", nil, nil, "nil handler"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			mux := http.NewServeMux()
			mux.Handle("GET /taken", ok)
			err := offline(t).Handle(mux, tt.pattern, tt.handler, tt.rules)
			if tt.want == nil && tt.msg == "" {
				if err != nil || !registered(mux, "GET", "/files/1") {
					t.Fatalf("Handle = %v, registered %v", err, registered(mux, "GET", "/files/1"))
				}
				return
			}
			var re *slidelimit.ConfigError
			if tt.want != nil && !isError(err, tt.want) || !errors.As(err, &re) || re.Route != tt.pattern ||
				!strings.Contains(fmt.Sprint(err), tt.msg) {
				t.Fatalf("Handle = %v, want a *ConfigError for %q wrapping %v", err, tt.pattern, tt.want)
			}
		})
	}
	// A param rule naming no wildcard is reported as in a limit tag, by
	// rules.ParseRoute.
	err := offline(t).Handle(http.NewServeMux(), "GET /a/{id}", ok, "ip:5/s; role(x)=param(other):1/s")
	if want := `slidelimit: route "GET /a/{id}": rules: "ip:5/s; role(x)=param(other):1/s": param "other" is not a wildcard ({other} or {other...}) of route pattern "GET /a/{id}" at offset 22`; err == nil || err.Error() != want {
		t.Errorf("Handle with an unknown param = %v, want %s", err, want)
	}
	// A malformed pattern is located by internal/muxpattern, as in a route tag.
	err = offline(t).Handle(http.NewServeMux(), "GET /a/{id}x", ok, "ip:1/s")
	if !isKind(err, "route") || !isError(err, errRuleInvalid) || !strings.Contains(err.Error(), "at offset 7") {
		t.Errorf("Handle with a malformed pattern = %v, want kind route, errRuleInvalid at offset 7", err)
	}
	var ce *slidelimit.ConfigError
	if err := offline(t).Handle(nil, "GET /", ok, "ip:1/s"); !errors.As(err, &ce) || !strings.Contains(err.Error(), "nil mux") {
		t.Errorf("nil mux: %v", err)
	}
}

func TestNewOptions(t *testing.T) {
	t.Parallel()
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	t.Cleanup(func() { c.Close() })
	for _, o := range []engine.Option{engine.WithNode(5000), engine.WithKeyPrefix("{x}"), engine.WithTimeout(-1)} {
		if _, err := slidelimit.New(c, slidelimit.WithEngineOptions(o)); !errors.Is(err, engine.ErrInvalid) {
			t.Errorf("New = %v, want engine.ErrInvalid", err)
		}
	}
	if _, err := slidelimit.New(nil); err == nil {
		t.Error("New(nil) succeeded")
	}
	// Middleware options are checked where a handler is wrapped.
	lim := offline(t, slidelimit.WithMiddlewareOptions(middleware.WithTrustedProxies("bogus")))
	if err := lim.Handle(http.NewServeMux(), "GET /", ok, "ip:1/s"); testutil.ConfigError(err, "option", "WithTrustedProxies") == nil {
		t.Errorf("Handle = %v, want a *middleware.ConfigError of WithTrustedProxies", err)
	}
}

// TestWithMiddlewareOptions checks that a cost function passed with
// WithMiddlewareOptions reaches the middleware: a group naming the
// registered cost function registers, one naming another does not.
func TestWithMiddlewareOptions(t *testing.T) {
	t.Parallel()
	lim := offline(t, slidelimit.WithCostFunc("bytes", func(*http.Request) (int64, error) { return 1, nil }))
	mux := http.NewServeMux()
	if err := lim.Handle(mux, "GET /files/{id}", http.NotFoundHandler(), "user:10/min; user[bytes]:2Gi/d~1h"); err != nil {
		t.Fatalf("registered cost function: %v", err)
	}
	err := lim.Handle(mux, "GET /other", http.NotFoundHandler(), "user[tokens]:5k/d")
	if !isError(err, unregistered("WithCostFunc")) || !strings.Contains(err.Error(), `unknown cost function "tokens" in rule user[tokens]`) {
		t.Errorf("unregistered cost function: %v", err)
	}
}

// TestRegisterMisspeltLimit: a route tag with a misspelt limit key
// registered the route unlimited without a word; it is a *ConfigError
// naming the field and the key, nothing is registered, and limit:"none"
// registers a route without rules.
func TestRegisterMisspeltLimit(t *testing.T) {
	t.Parallel()
	type api struct {
		Files  http.HandlerFunc `route:"GET /files/{id}" limt:"ip:1/min"`
		Health http.HandlerFunc `route:"GET /healthz" limit:"none"`
	}
	mux := http.NewServeMux()
	lim := offline(t)
	err := lim.Register(mux, &api{ok, ok})
	var ce *slidelimit.ConfigError
	if !errors.As(err, &ce) || ce.Field != "Files" || ce.Kind != "rule" {
		t.Fatalf("Register = %#v, want a *ConfigError of kind rule naming field Files", err)
	}
	if want := `(is "limt" a misspelling of limit?); write limit:"none" for a route without rules`; !strings.Contains(err.Error(), want) {
		t.Errorf("error %q does not contain %s", err, want)
	}
	if registered(mux, "GET", "/files/1") || registered(mux, "GET", "/healthz") {
		t.Error("a route was registered although Register failed")
	}
	type fixed struct {
		Health http.HandlerFunc `route:"GET /healthz" limit:"none"`
	}
	if err := lim.Register(mux, &fixed{ok}); err != nil || !registered(mux, "GET", "/healthz") {
		t.Errorf(`limit:"none": Register = %v, registered %v`, err, registered(mux, "GET", "/healthz"))
	}
}
