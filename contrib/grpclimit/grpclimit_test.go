package grpclimit_test

import (
	"context"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/emptypb"

	"github.com/slidelimit/slidelimit/contrib/grpclimit"
	"github.com/slidelimit/slidelimit/engine"
	"github.com/slidelimit/slidelimit/internal/redistest"
	"github.com/slidelimit/slidelimit/middleware"
	"github.com/slidelimit/slidelimit/role"
	"github.com/slidelimit/slidelimit/rules"
)

// details returns the RetryInfo and QuotaFailure of a status error.
func details(t *testing.T, err error) (*errdetails.RetryInfo, *errdetails.QuotaFailure) {
	t.Helper()
	var ri *errdetails.RetryInfo
	var qf *errdetails.QuotaFailure
	for _, d := range status.Convert(err).Details() {
		switch d := d.(type) {
		case *errdetails.RetryInfo:
			ri = d
		case *errdetails.QuotaFailure:
			qf = d
		}
	}
	return ri, qf
}

// backends runs test on miniredis and on a real redis-server.
func backends(t *testing.T, test func(t *testing.T, redisAddr string)) {
	t.Run("miniredis", func(t *testing.T) {
		t.Parallel()
		test(t, "")
	})
	t.Run("redis-server", func(t *testing.T) {
		t.Parallel()
		test(t, redistest.Start(t).Addr)
	})
}

// TestSixthCallDenied: a method at 5/s admits five calls with the
// rate-limit metadata, answers the sixth with ResourceExhausted carrying a
// RetryInfo of at most 1 s, a QuotaFailure naming the policy and the
// pushback trailer, and admits a call made after that delay.
func TestSixthCallDenied(t *testing.T) {
	t.Parallel()
	backends(t, func(t *testing.T, redisAddr string) {
		clk := redistest.NewClock()
		f := newFixture(t, setup{methods: map[string]string{ping: "ip:5/s"}, redisAddr: redisAddr,
			engine: []engine.Option{engine.WithClock(clk.Now)}})
		for i := range 5 {
			c := invoke(t, f.conn, ping)
			if c.err != nil {
				t.Fatalf("call %d: %v", i+1, c.err)
			}
			if got, want := c.header.Get("ratelimit-policy"), []string{`"ip-1s";q=5;w=1`}; strings.Join(got, "|") != want[0] {
				t.Errorf("call %d: ratelimit-policy %q, want %q", i+1, got, want)
			}
			if got, want := strings.Join(c.header.Get("ratelimit"), "|"), `"ip-1s";r=`+string(rune('4'-i))+`;t=1`; got != want {
				t.Errorf("call %d: ratelimit %q, want %q", i+1, got, want)
			}
		}
		c := invoke(t, f.conn, ping)
		if c.code() != codes.ResourceExhausted {
			t.Fatalf("sixth call: %v, want ResourceExhausted", c.err)
		}
		ri, qf := details(t, c.err)
		if ri == nil || ri.RetryDelay.AsDuration() <= 0 || ri.RetryDelay.AsDuration() > time.Second {
			t.Fatalf("RetryInfo = %v, want a delay in (0, 1s]", ri)
		}
		if qf == nil || len(qf.Violations) != 1 || qf.Violations[0].Subject != "ip-1s" || !strings.Contains(qf.Violations[0].Description, "at most 5 per 1s") {
			t.Errorf("QuotaFailure = %v, want one violation of ip-1s", qf)
		}
		// A denial's metadata is in the trailers (Trailers-Only), so that
		// clients may retry it.
		if got := strings.Join(c.trailer.Get("ratelimit"), "|"); got != `"ip-1s";r=0;t=1` {
			t.Errorf("denial's ratelimit %q", got)
		}
		if got := strings.Join(c.trailer.Get("ratelimit-policy"), "|"); got != `"ip-1s";q=5;w=1` {
			t.Errorf("denial's ratelimit-policy %q", got)
		}
		if len(c.header) != 0 {
			t.Errorf("denial sent response headers %v, which would commit the call", c.header)
		}
		if got := strings.Join(c.trailer.Get("grpc-retry-pushback-ms"), "|"); got != "1000" {
			t.Errorf("grpc-retry-pushback-ms %q, want 1000", got)
		}
		if n := f.handled.Load(); n != 5 {
			t.Errorf("handlers ran %d times, want 5", n)
		}
		clk.Add(ri.RetryDelay.AsDuration())
		if c := invoke(t, f.conn, ping); c.err != nil {
			t.Errorf("call after the RetryInfo delay: %v", c.err)
		}
	})
}

// TestStreamCountedOnce: a stream is one call at its start, however many
// messages it carries.
func TestStreamCountedOnce(t *testing.T) {
	t.Parallel()
	backends(t, func(t *testing.T, redisAddr string) {
		f := newFixture(t, setup{methods: map[string]string{chat: "user:2/min"}, redisAddr: redisAddr})
		for i := range 2 {
			err, got := stream(t, f.conn, 10, "x-user", "alice")
			if err != nil || got != 10 {
				t.Fatalf("stream %d: %v after %d messages, want 10 echoed", i+1, err, got)
			}
		}
		err, got := stream(t, f.conn, 10, "x-user", "alice")
		if status.Code(err) != codes.ResourceExhausted || got != 0 {
			t.Fatalf("third stream: %v after %d messages, want ResourceExhausted before any", err, got)
		}
		if ri, qf := details(t, err); ri == nil || qf == nil || qf.Violations[0].Subject != "user-1min" {
			t.Errorf("third stream's details: %v, %v", ri, qf)
		}
		if err, _ := stream(t, f.conn, 1, "x-user", "bob"); err != nil {
			t.Errorf("bob's stream: %v", err)
		}
		if n := f.handled.Load(); n != 3 {
			t.Errorf("stream handlers ran %d times, want 3", n)
		}
	})
}

// TestExemptNeverReachRedis: exempt methods (WithExempt, the health
// service) and exempt roles make no Redis command, while a limited caller
// does.
func TestExemptNeverReachRedis(t *testing.T) {
	t.Parallel()
	f := newFixture(t, setup{
		methods: map[string]string{ping: "ip:1/min; exempt:root"},
		opts:    []grpclimit.Option{grpclimit.WithDefault("ip:1/min"), grpclimit.WithExempt("/grpc.health.v1.Health/", other)},
	})
	hc := healthpb.NewHealthClient(f.conn)
	before := f.cmds.n.Load()
	for range 5 {
		if _, err := hc.Check(t.Context(), &healthpb.HealthCheckRequest{}); err != nil {
			t.Fatal(err)
		}
		if c := invoke(t, f.conn, ping, "x-user", "ops", "x-roles", "staff,root"); c.err != nil {
			t.Fatal(c.err)
		}
		if c := invoke(t, f.conn, other); c.err != nil {
			t.Fatal(c.err)
		}
	}
	if n := f.cmds.n.Load() - before; n != 0 {
		t.Fatalf("exempt calls sent %d Redis commands, want 0", n)
	}
	if c := invoke(t, f.conn, ping, "x-user", "alice"); c.err != nil {
		t.Fatal(c.err)
	}
	if c := invoke(t, f.conn, ping, "x-user", "alice"); c.code() != codes.ResourceExhausted {
		t.Fatalf("alice's second call: %v", c.err)
	}
	if f.cmds.n.Load() == before {
		t.Fatal("the command counter saw no command for limited calls")
	}
}

// TestSubjects: user counts by user id (by IP without identity), ip by the
// peer address, header by metadata; trusted proxies' x-forwarded-for is
// believed, an untrusted peer's is not.
func TestSubjects(t *testing.T) {
	t.Parallel()
	f := newFixture(t, setup{
		methods: map[string]string{
			ping:  "user:1/min",
			other: "ip:1/min; header(X-Api-Key):2/min",
			chat:  "ip:1/min",
		},
		opts: []grpclimit.Option{grpclimit.WithMiddlewareOptions(middleware.WithTrustedProxies("127.0.0.3"))},
	})
	local2 := f.dial(t, "127.0.0.2")
	proxy := f.dial(t, "127.0.0.3")
	steps := []struct {
		name   string
		conn   *grpc.ClientConn
		method string
		kv     []string
		want   codes.Code
	}{
		{"alice", f.conn, ping, []string{"x-user", "alice"}, codes.OK},
		{"alice again", f.conn, ping, []string{"x-user", "alice"}, codes.ResourceExhausted},
		{"bob, same IP", f.conn, ping, []string{"x-user", "bob"}, codes.OK},
		{"anonymous by IP", f.conn, ping, nil, codes.OK},
		{"anonymous by IP again", f.conn, ping, nil, codes.ResourceExhausted},
		{"anonymous from another IP", local2, ping, nil, codes.OK},
		{"ip", f.conn, other, []string{"x-user", "alice"}, codes.OK},
		{"ip, another user", f.conn, other, []string{"x-user", "bob"}, codes.ResourceExhausted},
		{"ip, another IP, same key", local2, other, []string{"x-api-key", "k1"}, codes.OK},
		{"header counts across IPs", proxy, other, []string{"x-api-key", "k1"}, codes.OK},
		{"header full", proxy, other, []string{"x-forwarded-for", "198.51.100.1", "x-api-key", "k1"}, codes.ResourceExhausted},
		{"untrusted x-forwarded-for ignored", local2, chat, []string{"x-forwarded-for", "203.0.113.1"}, codes.OK},
		{"untrusted, another x-forwarded-for", local2, chat, []string{"x-forwarded-for", "203.0.113.2"}, codes.ResourceExhausted},
		{"trusted proxy's client", proxy, chat, []string{"x-forwarded-for", "6.6.6.6, 203.0.113.1"}, codes.OK},
		{"trusted proxy's client again", proxy, chat, []string{"x-forwarded-for", "203.0.113.1"}, codes.ResourceExhausted},
		{"trusted proxy's other client", proxy, chat, []string{"x-forwarded-for", "203.0.113.2"}, codes.OK},
	}
	for _, s := range steps {
		var code codes.Code
		if s.method == chat {
			err, _ := stream(t, s.conn, 1, s.kv...)
			code = status.Code(err)
		} else {
			code = invoke(t, s.conn, s.method, s.kv...).code()
		}
		if code != s.want {
			t.Errorf("%s: %v, want %v", s.name, code, s.want)
		}
	}
}

// TestCountCodes: with count:, calls ending with an unlisted code are
// given back; listed ones stay counted, in either spelling, for unary
// calls and streams.
func TestCountCodes(t *testing.T) {
	t.Parallel()
	f := newFixture(t, setup{methods: map[string]string{
		ping: "ip:2/min; count:UNAUTHENTICATED",
		chat: "ip:2/min; count:Unauthenticated,PermissionDenied",
	}})
	unauth := []string{"want-code", "16"}
	for i := range 5 {
		if c := invoke(t, f.conn, ping); c.err != nil {
			t.Fatalf("successful call %d: %v (given back, never denied)", i+1, c.err)
		}
		if c := invoke(t, f.conn, ping, "want-code", "5"); c.code() != codes.NotFound {
			t.Fatalf("NotFound call %d: %v", i+1, c.err)
		}
	}
	for i := range 2 {
		if c := invoke(t, f.conn, ping, unauth...); c.code() != codes.Unauthenticated {
			t.Fatalf("failed call %d: %v", i+1, c.err)
		}
	}
	if c := invoke(t, f.conn, ping); c.code() != codes.ResourceExhausted {
		t.Fatalf("after two counted failures: %v, want ResourceExhausted", c.err)
	}
	for range 3 {
		if err, _ := stream(t, f.conn, 2); err != nil {
			t.Fatalf("successful stream: %v", err)
		}
	}
	if err, _ := stream(t, f.conn, 1, "want-code", "7"); status.Code(err) != codes.PermissionDenied {
		t.Fatal(err)
	}
	if err, _ := stream(t, f.conn, 1, unauth...); status.Code(err) != codes.Unauthenticated {
		t.Fatal(err)
	}
	if err, _ := stream(t, f.conn, 1); status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("stream after two counted failures: %v, want ResourceExhausted", err)
	}
}

// TestFailModes: with Redis down, fail:open admits, fail:closed answers
// Unavailable with a RetryInfo, fail:local decides in-process, and no
// internal error reaches the client.
func TestFailModes(t *testing.T) {
	t.Parallel()
	f := newFixture(t, setup{
		backendErrors: true,
		methods:       map[string]string{ping: "ip:2/min; fail:open", other: "ip:2/min; fail:closed", chat: "ip:1/min; fail:local"},
		engine:        []engine.Option{engine.WithTimeout(200 * time.Millisecond)},
	})
	f.mr.Close()
	for range 3 {
		if c := invoke(t, f.conn, ping); c.err != nil {
			t.Errorf("fail:open: %v", c.err)
		}
	}
	c := invoke(t, f.conn, other)
	if c.code() != codes.Unavailable {
		t.Fatalf("fail:closed: %v, want Unavailable", c.err)
	}
	if msg := status.Convert(c.err).Message(); msg != "rate limiter unavailable" {
		t.Errorf("fail:closed message %q leaks or differs", msg)
	}
	if ri, qf := details(t, c.err); ri == nil || ri.RetryDelay.AsDuration() != time.Second || qf != nil {
		t.Errorf("fail:closed details %v, %v; want RetryInfo 1s and no QuotaFailure", ri, qf)
	}
	if got := strings.Join(c.trailer.Get("ratelimit-policy"), ""); got != `"ip-1min";q=2;w=60` {
		t.Errorf("fail:closed ratelimit-policy %q", got)
	}
	if err, _ := stream(t, f.conn, 1); err != nil {
		t.Errorf("fail:local first stream: %v", err)
	}
	if err, _ := stream(t, f.conn, 1); status.Code(err) != codes.ResourceExhausted {
		t.Errorf("fail:local second stream: %v, want ResourceExhausted", err)
	}
}

// TestNeverAdmitted: a call costing more than a whole quota is refused
// without RetryInfo, with a pushback telling grpc-go not to retry, and
// without asking Redis.
func TestNeverAdmitted(t *testing.T) {
	t.Parallel()
	f := newFixture(t, setup{
		methods: map[string]string{ping: "user[rows]:100/min"},
		opts: []grpclimit.Option{grpclimit.WithCostFunc("rows", func(_ context.Context, method string, req any) (int64, error) {
			if _, ok := req.(*emptypb.Empty); !ok || method != ping {
				return 0, errors.New("unexpected call")
			}
			return 500, nil
		})},
	})
	before := f.cmds.n.Load()
	c := invoke(t, f.conn, ping, "x-user", "alice")
	if c.code() != codes.ResourceExhausted {
		t.Fatalf("%v, want ResourceExhausted", c.err)
	}
	ri, qf := details(t, c.err)
	if ri != nil || qf == nil || qf.Violations[0].Subject != "user[rows]-1min" {
		t.Errorf("details %v, %v; want no RetryInfo and a violation of user[rows]-1min", ri, qf)
	}
	if got := strings.Join(c.trailer.Get("grpc-retry-pushback-ms"), ""); got != "-1" {
		t.Errorf("pushback %q, want -1", got)
	}
	if n := f.cmds.n.Load() - before; n != 0 {
		t.Errorf("%d Redis commands for a call that can never be admitted", n)
	}
}

// TestRetryPolicyBacksOff: a grpc-go client whose service config retries
// RESOURCE_EXHAUSTED waits for the server's pushback and succeeds.
func TestRetryPolicyBacksOff(t *testing.T) {
	t.Parallel()
	f := newFixture(t, setup{methods: map[string]string{ping: "ip:5/s"}})
	retrying := f.dial(t, "127.0.0.1", grpc.WithDefaultServiceConfig(`{"methodConfig": [{
		"name": [{"service": "test.Svc", "method": "Ping"}],
		"retryPolicy": {"maxAttempts": 3, "initialBackoff": "0.01s", "maxBackoff": "0.01s",
			"backoffMultiplier": 1, "retryableStatusCodes": ["RESOURCE_EXHAUSTED"]}}]}`))
	for range 5 {
		if c := invoke(t, f.conn, ping); c.err != nil {
			t.Fatal(c.err)
		}
	}
	if c := invoke(t, f.conn, ping); c.code() != codes.ResourceExhausted {
		t.Fatalf("without a retry policy: %v, want ResourceExhausted", c.err)
	}
	start := time.Now()
	c := invoke(t, retrying, ping)
	took := time.Since(start)
	if c.err != nil {
		t.Fatalf("with a retry policy: %v", c.err)
	}
	// The backoff is 10ms; only the pushback (1000 ms) makes the client
	// wait long enough for a window entry to leave.
	if took < time.Second {
		t.Errorf("the retrying call took %v; it should have waited the 1s pushback", took)
	}
	if n := f.handled.Load(); n != 6 {
		t.Errorf("handlers ran %d times, want 6", n)
	}
}

// TestNewErrors: construction errors name the method and the offset in its
// rule text, and report every problem at once.
func TestNewErrors(t *testing.T) {
	t.Parallel()
	eng := offlineEngine(t)
	tests := []struct {
		name    string
		methods map[string]string
		opts    []grpclimit.Option
		want    []string
	}{
		{"param", map[string]string{ping: "ip:5/s; param(id):1/s"}, nil,
			[]string{`method "/test.Svc/Ping"`, "param(id) has no meaning for gRPC", "at offset 8"}},
		{"param in role rules", map[string]string{ping: "ip:5/s; role(a)=param(id):1/s"}, nil,
			[]string{"param(id) has no meaning", "at offset 16"}},
		{"HTTP status in count", map[string]string{ping: "ip:5/s; count:401"}, nil,
			[]string{"401 is an HTTP status", "at offset 14"}},
		{"unknown code", map[string]string{ping: "ip:5/s; count:UNAUTHORIZED"}, nil,
			[]string{`unknown gRPC status code "UNAUTHORIZED"`, "at offset 14"}},
		{"misspelt code", map[string]string{ping: "ip:5/s; count:unauthenticated"}, nil,
			[]string{"did you mean UNAUTHENTICATED?"}},
		{"duplicate code", map[string]string{ping: "ip:5/s; count:UNAUTHENTICATED,Unauthenticated"}, nil,
			[]string{"duplicate Unauthenticated in count", "at offset 30"}},
		{"key without function", map[string]string{ping: "ip:5/s; key(tenant):1/s"}, nil,
			[]string{`key(tenant) has no key function; register one with WithKeyFunc("tenant", fn)`, "at offset 8"}},
		{"cost function missing", map[string]string{ping: "user[rows]:5/s"}, nil,
			[]string{`names cost function "rows"`}},
		{"syntax", map[string]string{ping: "ip:5/fortnight"}, nil,
			[]string{`method "/test.Svc/Ping"`, `unknown unit "fortnight"`}},
		{"default", nil, []grpclimit.Option{grpclimit.WithDefault("ip:0/s")},
			[]string{"default rules", "limit 0 is below 1"}},
		{"method name", map[string]string{"test.Svc/Ping": "ip:5/s", "/test.Svc": "ip:5/s", "/a/b/c": "ip:1/s"}, nil,
			[]string{`"test.Svc/Ping": not a full method name`, `"/test.Svc": not a full method name`, `"/a/b/c"`}},
		{"exempt and limited", map[string]string{ping: "ip:5/s"}, []grpclimit.Option{grpclimit.WithExempt("/test.Svc/")},
			[]string{"both limited and exempt"}},
		{"bad exempt", nil, []grpclimit.Option{grpclimit.WithExempt("test")},
			[]string{`"test": in WithExempt: not a full method name`}},
		{"bad proxy", nil, []grpclimit.Option{grpclimit.WithMiddlewareOptions(middleware.WithTrustedProxies("10.0.0.0/33"))},
			[]string{"WithTrustedProxies"}},
		{"net/http option", nil, []grpclimit.Option{grpclimit.WithMiddlewareOptions(middleware.WithScope("x"), middleware.WithLegacyHeaders())},
			[]string{"middleware: WithScope is net/http's option, not for this transport", "middleware: WithLegacyHeaders is net/http's"}},
		{"undeclared role", map[string]string{ping: "ip:5/s; exempt:superadmn"},
			[]grpclimit.Option{grpclimit.WithMiddlewareOptions(middleware.WithPolicy(role.Policy{Roles: []role.Role{"admin", "superadmin"}}))},
			[]string{`role "superadmn" is not declared (declared roles: admin, superadmin)`, "at offset 15"}},
		{"undeclared role after count", map[string]string{ping: "ip:5/s; count:UNAUTHENTICATED; exempt:superadmn"},
			[]grpclimit.Option{grpclimit.WithMiddlewareOptions(middleware.WithPolicy(role.Policy{Roles: []role.Role{"admin", "superadmin"}}))},
			[]string{`"ip:5/s; count:UNAUTHENTICATED; exempt:superadmn": role "superadmn" is not declared`, "at offset 38"}},
		{"every problem", map[string]string{ping: "param(a):1/s", other: "ip:5/s; count:4xx"}, nil,
			[]string{"param(a) has no meaning", "4xx is an HTTP status"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := grpclimit.New(eng, tt.methods, tt.opts...)
			if err == nil {
				t.Fatal("New succeeded")
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
		})
	}
	t.Run("count needs a Finisher", func(t *testing.T) {
		t.Parallel()
		_, err := grpclimit.New(allowOnly{eng}, map[string]string{ping: "ip:5/s; count:OK"})
		if ce := configError(err, "decider"); ce == nil {
			t.Errorf("error %v, want a *middleware.ConfigError of the decider", err)
		}
	})
	t.Run("rules error located", func(t *testing.T) {
		t.Parallel()
		_, err := grpclimit.New(eng, map[string]string{ping: "ip:5/s; param(id):1/s"})
		me := configError(err, "rules")
		var re *rules.Error
		if me == nil || me.Name != ping || !errors.As(err, &re) || re.Offset != 8 || re.Syntax {
			t.Errorf("error %#v is not a *middleware.ConfigError for %s wrapping a *rules.Error at offset 8", err, ping)
		}
	})
}

// TestStreamHoldsSlot: a stream holds its in-flight slot until it ends:
// while alice's first stream runs her second is refused with a RetryInfo
// of one second, bob's runs, and once hers ended she may open another.
func TestStreamHoldsSlot(t *testing.T) {
	t.Parallel()
	backends(t, func(t *testing.T, redisAddr string) {
		f := newFixture(t, setup{methods: map[string]string{chat: "user:1 concurrent"}, redisAddr: redisAddr})
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		cs, err := f.conn.NewStream(metadata.AppendToOutgoingContext(ctx, "x-user", "alice"), &chatDesc, chat)
		if err != nil {
			t.Fatal(err)
		}
		// One echo: the stream was admitted and its handler runs.
		if err := cs.SendMsg(&emptypb.Empty{}); err != nil {
			t.Fatal(err)
		}
		if err := cs.RecvMsg(new(emptypb.Empty)); err != nil {
			t.Fatalf("first stream: %v", err)
		}
		err, _ = stream(t, f.conn, 1, "x-user", "alice")
		if status.Code(err) != codes.ResourceExhausted {
			t.Fatalf("second stream while the first runs: %v, want ResourceExhausted", err)
		}
		if ri, qf := details(t, err); ri == nil || ri.RetryDelay.AsDuration() != time.Second || qf == nil || qf.Violations[0].Subject != "user-concurrent" {
			t.Errorf("second stream's details: %v, %v", ri, qf)
		}
		if err, _ := stream(t, f.conn, 1, "x-user", "bob"); err != nil {
			t.Errorf("bob's stream: %v", err)
		}
		_ = cs.CloseSend()
		if err := cs.RecvMsg(new(emptypb.Empty)); !errors.Is(err, io.EOF) {
			t.Fatalf("end of the first stream: %v", err)
		}
		// The slot is released before the stream's status is sent.
		if err, got := stream(t, f.conn, 1, "x-user", "alice"); err != nil || got != 1 {
			t.Errorf("alice's stream after the first ended: %v (%d echoed)", err, got)
		}
	})
}
