package grpclimit_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/emptypb"

	"github.com/slidelimit/slidelimit/contrib/grpclimit"
	"github.com/slidelimit/slidelimit/middleware"
	"github.com/slidelimit/slidelimit/role"
	"github.com/slidelimit/slidelimit/rules"
)

// TestScopes: methods under the default have windows of their own (the
// full method name is the scope); a scope: statement makes methods share.
func TestScopes(t *testing.T) {
	t.Parallel()
	t.Run("default per method", func(t *testing.T) {
		t.Parallel()
		f := newFixture(t, setup{opts: []grpclimit.Option{grpclimit.WithDefault("ip:1/min")}})
		for _, s := range []struct {
			method string
			want   codes.Code
		}{{ping, codes.OK}, {ping, codes.ResourceExhausted}, {other, codes.OK}, {other, codes.ResourceExhausted}} {
			if c := invoke(t, f.conn, s.method); c.code() != s.want {
				t.Errorf("%s: %v, want %v", s.method, c.err, s.want)
			}
		}
	})
	t.Run("scope statement shares", func(t *testing.T) {
		t.Parallel()
		f := newFixture(t, setup{methods: map[string]string{ping: "ip:2/min; scope:pings", other: "ip:2/min; scope:pings"}})
		for _, s := range []struct {
			method string
			want   codes.Code
		}{{ping, codes.OK}, {other, codes.OK}, {ping, codes.ResourceExhausted}, {other, codes.ResourceExhausted}} {
			if c := invoke(t, f.conn, s.method); c.code() != s.want {
				t.Errorf("%s: %v, want %v", s.method, c.err, s.want)
			}
		}
	})
}

// TestEveryViolation: QuotaFailure names every window the call does not
// fit in, the denying one first, and the RetryInfo is the longest wait.
func TestEveryViolation(t *testing.T) {
	t.Parallel()
	f := newFixture(t, setup{methods: map[string]string{ping: "ip:1/min; user:1/h,10/d"}})
	if c := invoke(t, f.conn, ping, "x-user", "alice"); c.err != nil {
		t.Fatal(c.err)
	}
	c := invoke(t, f.conn, ping, "x-user", "alice")
	ri, qf := details(t, c.err)
	if c.code() != codes.ResourceExhausted || ri == nil || qf == nil {
		t.Fatalf("%v", c.err)
	}
	var got []string
	for _, v := range qf.Violations {
		got = append(got, v.Subject)
	}
	if strings.Join(got, ",") != "user-1h,ip-1min" {
		t.Errorf("violations %q, want user-1h (the longest wait) then ip-1min", got)
	}
	if d := ri.RetryDelay.AsDuration().Seconds(); d != 3600 {
		t.Errorf("RetryInfo %vs, want 3600s (the hour window's wait, rounded up)", d)
	}
}

// TestShadowKeysAndCosts: shadow mode never refuses and sends no
// rate-limit metadata; key(name) counts what its function returns; a
// failing cost function refuses the call without echoing its error.
func TestShadowKeysAndCosts(t *testing.T) {
	t.Parallel()
	errSecret := errors.New("secret backend detail")
	f := newFixture(t, setup{
		methods: map[string]string{
			ping:  "ip:1/min; mode:shadow",
			other: "key(tenant):1/min; ip[rows]:100/min",
		},
		opts: []grpclimit.Option{
			grpclimit.WithKeyFunc("tenant", func(ctx context.Context) string {
				md, _ := metadata.FromIncomingContext(ctx)
				return strings.Join(md.Get("x-tenant"), "")
			}),
			grpclimit.WithCostFunc("rows", func(ctx context.Context, _ string, _ any) (int64, error) {
				md, _ := metadata.FromIncomingContext(ctx)
				switch strings.Join(md.Get("x-rows"), "") {
				case "bad":
					return 0, fmt.Errorf("%w: no rows header", middleware.ErrBadRequest)
				case "broken":
					return 0, errSecret
				}
				return 1, nil
			}),
		},
	})
	for i := range 3 {
		c := invoke(t, f.conn, ping)
		if c.err != nil || len(c.header.Get("ratelimit")) != 0 || len(c.header.Get("ratelimit-policy")) != 0 {
			t.Errorf("shadow call %d: %v, header %v", i+1, c.err, c.header)
		}
	}
	steps := []struct {
		kv   []string
		want codes.Code
	}{
		{[]string{"x-tenant", "a"}, codes.OK},
		{[]string{"x-tenant", "a"}, codes.ResourceExhausted},
		{[]string{"x-tenant", "b"}, codes.OK},
		{[]string{"x-tenant", "c", "x-rows", "bad"}, codes.InvalidArgument},
		{[]string{"x-tenant", "c", "x-rows", "broken"}, codes.Internal},
		{[]string{"x-tenant", "c"}, codes.OK}, // the refused calls were not counted
	}
	for i, s := range steps {
		c := invoke(t, f.conn, other, s.kv...)
		if c.code() != s.want {
			t.Errorf("step %d %v: %v, want %v", i+1, s.kv, c.err, s.want)
		}
		if msg := status.Convert(c.err).Message(); strings.Contains(msg, "secret") || strings.Contains(msg, "rows header") {
			t.Errorf("step %d: message %q echoes an internal error", i+1, msg)
		}
	}
}

// TestHookEvents: WithHook receives the HTTP middleware's Event for every
// call of a limited method, with the HTTP status of the same answer, so
// that promlimit and otellimit count gRPC calls unchanged.
func TestHookEvents(t *testing.T) {
	t.Parallel()
	f := newFixture(t, setup{methods: map[string]string{ping: "user:1/min; exempt:root"}})
	invoke(t, f.conn, ping, "x-user", "ops", "x-roles", "root")
	invoke(t, f.conn, ping, "x-user", "alice")
	invoke(t, f.conn, ping, "x-user", "alice")
	invoke(t, f.conn, other) // not limited: no event
	var got []string
	for _, ev := range f.events() {
		// The source is left out: the denial may come from Redis or from
		// the engine's cached denials.
		got = append(got, fmt.Sprintf("%s exempt=%v allowed=%v status=%d policy=%s latency=%v",
			ev.Scope, ev.Exempt, ev.Allowed, ev.Status, ev.Policy, ev.Latency > 0))
	}
	want := []string{
		" exempt=true allowed=true status=0 policy= latency=false",
		ping + " exempt=false allowed=true status=0 policy=user-1min latency=true",
		ping + " exempt=false allowed=false status=429 policy=user-1min latency=true",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("events:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// TestHandlerErrorsStayRetryable: the rate-limit metadata of an admitted
// call rides on the response headers only when the handler sends them; a
// call failing without them keeps a Trailers-Only response (metadata in
// the trailers), which a client's retry policy may still retry.
func TestHandlerErrorsStayRetryable(t *testing.T) {
	t.Parallel()
	f := newFixture(t, setup{methods: map[string]string{ping: "ip:100/min", chat: "ip:100/min"}})
	retrying := f.dial(t, "127.0.0.1", grpc.WithDefaultServiceConfig(`{"methodConfig": [{
		"name": [{"service": "test.Svc", "method": "Ping"}],
		"retryPolicy": {"maxAttempts": 3, "initialBackoff": "0.01s", "maxBackoff": "0.01s",
			"backoffMultiplier": 1, "retryableStatusCodes": ["UNAVAILABLE"]}}]}`))
	c := invoke(t, retrying, ping, "want-code", "14")
	if c.code() != codes.Unavailable {
		t.Fatalf("%v, want the handler's Unavailable", c.err)
	}
	if n := f.handled.Load(); n != 3 {
		t.Errorf("the handler ran %d times, want 3: the client's retry policy retried", n)
	}
	if len(c.header) != 0 || !strings.HasPrefix(strings.Join(c.trailer.Get("ratelimit"), ""), `"ip-1min";r=`) {
		t.Errorf("failed call: header %v, trailer %v; want the metadata in the trailer", c.header, c.trailer)
	}

	policy := `"ip-1min";q=100;w=60`
	ctx := metadata.AppendToOutgoingContext(t.Context(), "want-code", "5")
	cs, err := f.conn.NewStream(ctx, &chatDesc, chat)
	if err != nil {
		t.Fatal(err)
	}
	_ = cs.CloseSend()
	if err := cs.RecvMsg(new(emptypb.Empty)); status.Code(err) != codes.NotFound {
		t.Fatalf("stream failing before any message: %v", err)
	}
	if got := strings.Join(cs.Trailer().Get("ratelimit-policy"), ""); got != policy {
		t.Errorf("stream failing before any message: trailer ratelimit-policy %q, want %q", got, policy)
	}
	cs, err = f.conn.NewStream(t.Context(), &chatDesc, chat)
	if err != nil {
		t.Fatal(err)
	}
	if err := cs.SendMsg(&emptypb.Empty{}); err != nil {
		t.Fatal(err)
	}
	if err := cs.RecvMsg(new(emptypb.Empty)); err != nil {
		t.Fatal(err)
	}
	h, err := cs.Header()
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(h.Get("ratelimit-policy"), ""); got != policy {
		t.Errorf("stream sending messages: header ratelimit-policy %q, want %q", got, policy)
	}
	_ = cs.CloseSend()
}

// TestRolesAndPolicy: a role's rules replace the defaults, and a role
// of WithPolicy's ByIP counts its user rules by client IP.
func TestRolesAndPolicy(t *testing.T) {
	t.Parallel()
	f := newFixture(t, setup{
		methods: map[string]string{ping: "user:1/min; role(premium)=user:3/min"},
		opts:    []grpclimit.Option{grpclimit.WithMiddlewareOptions(middleware.WithPolicy(role.Policy{ByIP: []role.Role{"shared"}}))},
	})
	local2 := f.dial(t, "127.0.0.2")
	steps := []struct {
		name string
		conn *grpc.ClientConn
		kv   []string
		want codes.Code
	}{
		{"premium 1", f.conn, []string{"x-user", "p", "x-roles", "premium"}, codes.OK},
		{"premium 2", f.conn, []string{"x-user", "p", "x-roles", "premium"}, codes.OK},
		{"premium 3", f.conn, []string{"x-user", "p", "x-roles", "premium"}, codes.OK},
		{"premium 4", f.conn, []string{"x-user", "p", "x-roles", "premium"}, codes.ResourceExhausted},
		{"shared account, first person", f.conn, []string{"x-user", "admin", "x-roles", "shared"}, codes.OK},
		{"shared account, same IP", f.conn, []string{"x-user", "admin", "x-roles", "shared"}, codes.ResourceExhausted},
		{"shared account, another IP", local2, []string{"x-user", "admin", "x-roles", "shared"}, codes.OK},
	}
	for _, s := range steps {
		if c := invoke(t, s.conn, ping, s.kv...); c.code() != s.want {
			t.Errorf("%s: %v, want %v", s.name, c.err, s.want)
		}
	}
}

// TestSharedWithHTTP: a gRPC method and an HTTP route with the same scope:
// count a client in the same windows, because both transports build
// subjects with the same code.
func TestSharedWithHTTP(t *testing.T) {
	t.Parallel()
	const text = "ip:3/min; user:10/min; scope:orders"
	f := newFixture(t, setup{methods: map[string]string{ping: text}})
	mw, err := middleware.New(rules.MustParse(text), f.eng)
	if err != nil {
		t.Fatal(err)
	}
	h := mw(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	get := func(user string) int {
		r := httptest.NewRequest("GET", "/orders", nil)
		r.RemoteAddr = "127.0.0.1:4711"
		r = r.WithContext(role.NewContext(r.Context(), role.Identity{User: user}))
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		return w.Code
	}
	if c := invoke(t, f.conn, ping, "x-user", "alice"); c.err != nil {
		t.Fatal(c.err)
	}
	if code := get("bob"); code != http.StatusOK {
		t.Fatalf("HTTP: %d", code)
	}
	if c := invoke(t, f.conn, ping, "x-user", "carol"); c.err != nil {
		t.Fatal(c.err)
	}
	// 127.0.0.1 has made 3 calls over both transports.
	if code := get("dave"); code != http.StatusTooManyRequests {
		t.Errorf("HTTP after 3 calls from the IP: %d, want 429", code)
	}
	if c := invoke(t, f.conn, ping, "x-user", "erin"); c.code() != codes.ResourceExhausted {
		t.Errorf("gRPC after 3 calls from the IP: %v, want ResourceExhausted", c.err)
	}
}
