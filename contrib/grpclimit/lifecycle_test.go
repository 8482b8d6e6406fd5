package grpclimit_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/emptypb"

	"github.com/slidelimit/slidelimit/contrib/grpclimit"
	"github.com/slidelimit/slidelimit/engine"
	"github.com/slidelimit/slidelimit/internal/redistest"
	"github.com/slidelimit/slidelimit/internal/testutil"
	"github.com/slidelimit/slidelimit/middleware"
	"github.com/slidelimit/slidelimit/role"
	"github.com/slidelimit/slidelimit/rules"
)

// The lifecycle table: one list of behaviours of a request's life (one
// Admission, which grpclimit reaches through package transport), run
// against both adapters, net/http's middleware
// and grpclimit's interceptors. A step is a call by a user whose handler
// does something (answer, fail, panic, hold until released, stream); its
// result is what the client saw: ok, denied (429 / ResourceExhausted),
// unavailable (503 / Unavailable), fail (500 / Internal, the handler's own
// failure) or broken (the handler panicked).
//
// Both adapters register the cost function bytes, which estimates 10 per
// call, and settle it (WithSettle): a group that names it counts 10 at
// admission, then what the handler reported (a step's report).

// A step is one call, or the release of a held one.
type step struct {
	user   string // "" for none (counted by IP)
	role   string
	do     string // ok, fail, panic, hold (until a release step), hangup (the client leaves while held), stream, release
	report int64  // the actual bytes cost the handler reports (ReportCost); 0 reports nothing
	want   string // the result; empty for hold, hangup and release
}

// lifeEstimate is what the cost function bytes estimates for every call.
const lifeEstimate = 10

var lifecycleCases = []struct {
	name       string
	http, grpc string // the rule text for each (count: items differ)
	down       bool   // Redis refuses every call
	steps      []step
}{
	{name: "exempt", http: "user:1/min; exempt:admin", grpc: "user:1/min; exempt:admin", steps: []step{
		{user: "a", role: "admin", do: "ok", want: "ok"}, {user: "a", role: "admin", do: "ok", want: "ok"},
		{user: "a", do: "ok", want: "ok"}, {user: "a", do: "ok", want: "denied"}}},
	{name: "shadow", http: "user:1/min; mode:shadow; block:1h", grpc: "user:1/min; mode:shadow; block:1h", steps: []step{
		{user: "a", do: "ok", want: "ok"}, {user: "a", do: "ok", want: "ok"}, {user: "a", do: "ok", want: "ok"}}},
	{name: "block", http: "user:1/min; ip:100/min; block:1h", grpc: "user:1/min; ip:100/min; block:1h", steps: []step{
		{user: "a", do: "ok", want: "ok"}, {user: "a", do: "ok", want: "denied"}, {user: "a", do: "ok", want: "denied"},
		{user: "b", do: "ok", want: "ok"}}},
	{name: "slots", http: "user:1 concurrent", grpc: "user:1 concurrent", steps: []step{
		{user: "a", do: "hold"}, {user: "a", do: "ok", want: "denied"}, {user: "b", do: "ok", want: "ok"},
		{do: "release"}, {user: "a", do: "ok", want: "ok"}}},
	{name: "count", http: "user:2/min; count:500", grpc: "user:2/min; count:INTERNAL", steps: []step{
		{user: "a", do: "ok", want: "ok"}, {user: "a", do: "ok", want: "ok"}, {user: "a", do: "ok", want: "ok"},
		{user: "a", do: "fail", want: "fail"}, {user: "a", do: "fail", want: "fail"}, {user: "a", do: "ok", want: "denied"}}},
	{name: "count with slots", http: "user:2/min,1 concurrent; count:500", grpc: "user:2/min,1 concurrent; count:INTERNAL", steps: []step{
		{user: "a", do: "ok", want: "ok"}, {user: "a", do: "ok", want: "ok"}, {user: "a", do: "fail", want: "fail"},
		{user: "a", do: "ok", want: "ok"}, {user: "a", do: "fail", want: "fail"}, {user: "a", do: "ok", want: "denied"}}},
	{name: "panicking handler", http: "user:2/min,1 concurrent; count:500", grpc: "user:2/min,1 concurrent; count:INTERNAL", steps: []step{
		{user: "a", do: "panic", want: "broken"}, {user: "a", do: "ok", want: "ok"}, // the slot is free, the panic counted
		{user: "a", do: "fail", want: "fail"}, {user: "a", do: "ok", want: "denied"}}},
	{name: "client hang-up", http: "user:1 concurrent", grpc: "user:1 concurrent", steps: []step{
		{user: "a", do: "hangup"}, {user: "a", do: "ok", want: "denied"}, {do: "release"}, {user: "a", do: "ok", want: "ok"}}},
	{name: "stream end", http: "user:1 concurrent", grpc: "user:1 concurrent", steps: []step{
		{user: "a", do: "stream", want: "ok"}, {user: "a", do: "stream", want: "ok"}, {user: "a", do: "hold"},
		{user: "a", do: "stream", want: "denied"}, {do: "release"}, {user: "a", do: "stream", want: "ok"}}},
	// 35 bytes a minute admit three calls at their estimate of 10. Settled
	// to 1, three leave room for more; a call whose handler panicked (after
	// reporting) or that reports nothing keeps its estimate: 1+1+1+10+10+10
	// = 33 leaves no room for the seventh.
	{name: "settlement", http: "user[bytes]:35/min", grpc: "user[bytes]:35/min", steps: []step{
		{user: "a", do: "ok", report: 1, want: "ok"}, {user: "a", do: "ok", report: 1, want: "ok"},
		{user: "a", do: "stream", report: 1, want: "ok"}, {user: "a", do: "panic", report: 1, want: "broken"},
		{user: "a", do: "ok", want: "ok"}, {user: "a", do: "stream", want: "ok"},
		{user: "a", do: "ok", report: 1, want: "denied"}}},
	{name: "fail open", http: "user:1/min; fail:open", grpc: "user:1/min; fail:open", down: true, steps: []step{
		{user: "a", do: "ok", want: "ok"}, {user: "a", do: "ok", want: "ok"}}},
	{name: "fail closed", http: "user:1/min; fail:closed", grpc: "user:1/min; fail:closed", down: true, steps: []step{
		{user: "a", do: "ok", want: "unavailable"}}},
	{name: "fail local", http: "user:1/min; fail:local", grpc: "user:1/min; fail:local", down: true, steps: []step{
		{user: "a", do: "ok", want: "ok"}, {user: "a", do: "ok", want: "denied"}}},
}

// An adapter serves calls through one transport's limiter.
type adapter interface {
	call(t *testing.T, s step) string
}

// held holds calls until released, and tells when one entered. It also
// counts the calls in a server, their finish included (see syncFinish).
type held struct {
	entered chan struct{}
	release chan struct{}
	running atomic.Int64
}

// serve runs a call's server side, counted in running.
func (h *held) serve(f func()) {
	h.running.Add(1)
	defer h.running.Add(-1)
	f()
}

// syncFinish finishes a request before its handler chain returns, so that
// a call has ended, finish included, once it leaves the server.
type syncFinish struct{ *engine.Engine }

func (s syncFinish) FinishAsync(d engine.Decision, o engine.Outcome) {
	_ = s.Finish(context.Background(), d, o) // errors are the engine's to log
}

func newHeld() *held { return &held{entered: make(chan struct{}, 8), release: make(chan struct{})} }

func (h *held) wait(ctx context.Context) {
	// Read release before telling that the call entered: the test makes
	// a new one once the held calls' clients returned, which a hang-up's
	// does before its handler ends.
	release := h.release
	h.entered <- struct{}{}
	select {
	case <-release:
	case <-time.After(10 * time.Second):
	}
}

func TestLifecycleTable(t *testing.T) {
	t.Parallel()
	for _, tc := range lifecycleCases {
		for _, tr := range []string{"http", "grpc"} {
			t.Run(tc.name+"/"+tr, func(t *testing.T) {
				t.Parallel()
				eng := lifecycleEngine(t, tc.down)
				h := newHeld()
				var a adapter
				if tr == "http" {
					a = newHTTPAdapter(t, eng, tc.http, h)
				} else {
					a = newGRPCAdapter(t, eng, tc.grpc, h)
				}
				var wg sync.WaitGroup
				holding := int64(0)
				// The finish runs after the response: each step waits for
				// the calls it made to leave the server.
				finished := func(i int) {
					redistest.Eventually(t, fmt.Sprintf("step %d's finish", i), func() bool { return h.running.Load() == holding })
				}
				for i, s := range tc.steps {
					switch s.do {
					case "hold", "hangup":
						wg.Go(func() { a.call(t, s) })
						select {
						case <-h.entered:
						case <-time.After(10 * time.Second):
							t.Fatalf("step %d: the held call never reached its handler", i)
						}
						holding++
						continue
					case "release":
						close(h.release)
						wg.Wait()
						h.release = make(chan struct{})
						holding = 0
						finished(i)
						continue
					}
					if got := a.call(t, s); got != s.want {
						t.Fatalf("step %d (%+v): %s, want %s", i, s, got, s.want)
					}
					finished(i)
				}
				close(h.release)
				wg.Wait()
			})
		}
	}
}

// lifecycleEngine returns an engine on miniredis, or on a refused address.
func lifecycleEngine(t *testing.T, down bool) *engine.Engine {
	addr := "127.0.0.1:1"
	if !down {
		addr = miniredis.RunT(t).Addr()
	}
	rc := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, ContextTimeoutEnabled: true})
	t.Cleanup(func() { rc.Close() })
	return testutil.NewEngine(t, rc)
}

type httpAdapter struct{ srv *httptest.Server }

func newHTTPAdapter(t *testing.T, eng *engine.Engine, text string, h *held) *httpAdapter {
	mw, err := middleware.New(rules.MustParse(text), syncFinish{eng}, middleware.WithScope("s"),
		middleware.WithCostFunc("bytes", func(*http.Request) (int64, error) { return lifeEstimate, nil }),
		middleware.WithSettle("bytes", middleware.Settlement{}))
	if err != nil {
		t.Fatal(err)
	}
	handler := mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if v := r.Header.Get("X-Report"); v != "" {
			n, _ := strconv.ParseInt(v, 10, 64)
			if !middleware.ReportCost(r.Context(), "bytes", n) {
				t.Errorf("ReportCost(%d) found no settlement to report to", n)
			}
		}
		switch r.Header.Get("X-Do") {
		case "fail":
			w.WriteHeader(http.StatusInternalServerError)
		case "panic":
			panic(http.ErrAbortHandler) // net/http recovers it and drops the connection
		case "hold", "hangup":
			h.wait(r.Context())
		case "stream":
			for range 3 {
				_, _ = w.Write([]byte("chunk"))
				w.(http.Flusher).Flush()
			}
		}
	}))
	auth := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if u := r.Header.Get("X-User"); u != "" {
			id := role.Identity{User: u}
			if ro := r.Header.Get("X-Role"); ro != "" {
				id.Roles = []role.Role{role.Role(ro)}
			}
			r = r.WithContext(role.NewContext(r.Context(), id))
		}
		handler.ServeHTTP(w, r)
	})
	a := &httpAdapter{srv: httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.serve(func() { auth.ServeHTTP(w, r) })
	}))}
	t.Cleanup(a.srv.Close)
	return a
}

func (a *httpAdapter) call(t *testing.T, s step) string {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if s.do == "hangup" {
		var c2 context.CancelFunc
		ctx, c2 = context.WithCancel(ctx)
		time.AfterFunc(100*time.Millisecond, c2)
	}
	r, _ := http.NewRequestWithContext(ctx, "GET", a.srv.URL, nil)
	r.Header.Set("X-Do", s.do)
	r.Header.Set("X-User", s.user)
	r.Header.Set("X-Role", s.role)
	if s.report > 0 {
		r.Header.Set("X-Report", strconv.FormatInt(s.report, 10))
	}
	resp, err := http.DefaultClient.Do(r)
	if err != nil {
		return "broken"
	}
	defer resp.Body.Close()
	switch resp.StatusCode {
	case http.StatusOK:
		return "ok"
	case http.StatusTooManyRequests:
		return "denied"
	case http.StatusServiceUnavailable:
		return "unavailable"
	case http.StatusInternalServerError:
		return "fail"
	}
	return resp.Status
}

type grpcAdapter struct{ conn *grpc.ClientConn }

const lifeUnary, lifeStream = "/life.Svc/Call", "/life.Svc/Stream"

func newGRPCAdapter(t *testing.T, eng *engine.Engine, text string, h *held) *grpcAdapter {
	lim, err := grpclimit.New(syncFinish{eng}, map[string]string{lifeUnary: text + "; scope:s", lifeStream: text + "; scope:s"},
		grpclimit.WithCostFunc("bytes", func(context.Context, string, any) (int64, error) { return lifeEstimate, nil }),
		grpclimit.WithMiddlewareOptions(middleware.WithSettle("bytes", middleware.Settlement{})))
	if err != nil {
		t.Fatal(err)
	}
	report := func(ctx context.Context) {
		md, _ := metadata.FromIncomingContext(ctx)
		if v := first(md.Get("x-report")); v != "" {
			n, _ := strconv.ParseInt(v, 10, 64)
			if !middleware.ReportCost(ctx, "bytes", n) {
				t.Errorf("ReportCost(%d) found no settlement to report to", n)
			}
		}
	}
	do := func(ctx context.Context) error {
		report(ctx)
		md, _ := metadata.FromIncomingContext(ctx)
		switch first(md.Get("x-do")) {
		case "fail":
			return status.Error(codes.Internal, "failed")
		case "panic":
			panic("handler panicked")
		case "hold", "hangup":
			h.wait(ctx)
		}
		return nil
	}
	// A service recovers its handlers' panics outside the limiter, as
	// grpc-go does not.
	recoverU := func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, hd grpc.UnaryHandler) (resp any, err error) {
		defer func() {
			if recover() != nil {
				err = status.Error(codes.Unknown, "panic")
			}
		}()
		return hd(grpcAuth(ctx), req)
	}
	serveU := func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, hd grpc.UnaryHandler) (resp any, err error) {
		h.serve(func() { resp, err = hd(ctx, req) })
		return resp, err
	}
	srv := grpc.NewServer(grpc.ChainUnaryInterceptor(serveU, recoverU, lim.UnaryServerInterceptor()),
		grpc.ChainStreamInterceptor(func(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, hd grpc.StreamHandler) (err error) {
			h.serve(func() { err = hd(srv, authStream{ss, grpcAuth(ss.Context())}) })
			return err
		}, lim.StreamServerInterceptor()))
	srv.RegisterService(&grpc.ServiceDesc{
		ServiceName: "life.Svc", HandlerType: (*any)(nil),
		Methods: []grpc.MethodDesc{{MethodName: "Call", Handler: func(_ any, ctx context.Context, dec func(any) error, icpt grpc.UnaryServerInterceptor) (any, error) {
			if err := dec(new(emptypb.Empty)); err != nil {
				return nil, err
			}
			return icpt(ctx, nil, &grpc.UnaryServerInfo{FullMethod: lifeUnary}, func(ctx context.Context, _ any) (any, error) {
				return &emptypb.Empty{}, do(ctx)
			})
		}}},
		Streams: []grpc.StreamDesc{{StreamName: "Stream", ServerStreams: true, Handler: func(_ any, ss grpc.ServerStream) error {
			if err := ss.RecvMsg(new(emptypb.Empty)); err != nil {
				return err
			}
			report(ss.Context())
			for range 3 {
				if err := ss.SendMsg(&emptypb.Empty{}); err != nil {
					return err
				}
			}
			return nil
		}}},
	}, nil)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(ln)
	t.Cleanup(srv.Stop)
	conn, err := grpc.NewClient("passthrough:///"+ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return &grpcAdapter{conn: conn}
}

func first(vs []string) string {
	if len(vs) == 0 {
		return ""
	}
	return vs[0]
}

// grpcAuth puts the user and role of the metadata in the context.
func grpcAuth(ctx context.Context) context.Context {
	md, _ := metadata.FromIncomingContext(ctx)
	u := first(md.Get("x-user"))
	if u == "" {
		return ctx
	}
	id := role.Identity{User: u}
	if ro := first(md.Get("x-role")); ro != "" {
		id.Roles = []role.Role{role.Role(ro)}
	}
	return role.NewContext(ctx, id)
}

func (a *grpcAdapter) call(t *testing.T, s step) string {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if s.do == "hangup" {
		var c2 context.CancelFunc
		ctx, c2 = context.WithCancel(ctx)
		time.AfterFunc(100*time.Millisecond, c2)
	}
	ctx = metadata.AppendToOutgoingContext(ctx, "x-do", s.do, "x-user", s.user, "x-role", s.role)
	if s.report > 0 {
		ctx = metadata.AppendToOutgoingContext(ctx, "x-report", strconv.FormatInt(s.report, 10))
	}
	var err error
	if s.do == "stream" {
		err = a.stream(ctx)
	} else {
		err = a.conn.Invoke(ctx, lifeUnary, &emptypb.Empty{}, &emptypb.Empty{})
	}
	switch status.Code(err) {
	case codes.OK:
		return "ok"
	case codes.ResourceExhausted:
		return "denied"
	case codes.Unavailable:
		return "unavailable"
	case codes.Internal:
		return "fail"
	case codes.Unknown:
		return "broken"
	}
	return err.Error()
}

// stream opens a server stream and reads it to its end.
func (a *grpcAdapter) stream(ctx context.Context) error {
	err := readStream(ctx, a.conn, lifeStream, func() any { return new(emptypb.Empty) })
	if errors.Is(err, context.Canceled) {
		return nil
	}
	return err
}
