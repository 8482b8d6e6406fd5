package grpclimit_test

import (
	"context"
	"errors"
	"io"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/emptypb"

	"github.com/slidelimit/slidelimit/contrib/grpclimit"
	"github.com/slidelimit/slidelimit/engine"
	"github.com/slidelimit/slidelimit/internal/redistest"
	"github.com/slidelimit/slidelimit/internal/testutil"
	"github.com/slidelimit/slidelimit/middleware"
	"github.com/slidelimit/slidelimit/role"
)

// Test service test.Svc, described by hand so that no generated code is
// needed: Ping and Other are unary, Chat a bidirectional stream, all of
// google.protobuf.Empty. Each answers with the code in the incoming
// metadata key want-code (OK without one).
const (
	ping  = "/test.Svc/Ping"
	other = "/test.Svc/Other"
	chat  = "/test.Svc/Chat"
)

var chatDesc = grpc.StreamDesc{StreamName: "Chat", ServerStreams: true, ClientStreams: true}

func svcDesc(handled *atomic.Int64) *grpc.ServiceDesc {
	unary := func(name string) grpc.MethodDesc {
		return grpc.MethodDesc{MethodName: name, Handler: func(srv any, ctx context.Context, dec func(any) error, icpt grpc.UnaryServerInterceptor) (any, error) {
			in := new(emptypb.Empty)
			if err := dec(in); err != nil {
				return nil, err
			}
			h := func(ctx context.Context, _ any) (any, error) {
				handled.Add(1)
				return &emptypb.Empty{}, wantCode(ctx)
			}
			if icpt == nil {
				return h(ctx, in)
			}
			return icpt(ctx, in, &grpc.UnaryServerInfo{Server: srv, FullMethod: "/test.Svc/" + name}, h)
		}}
	}
	return &grpc.ServiceDesc{
		ServiceName: "test.Svc",
		HandlerType: (*any)(nil),
		Methods:     []grpc.MethodDesc{unary("Ping"), unary("Other")},
		Streams: []grpc.StreamDesc{{StreamName: "Chat", ServerStreams: true, ClientStreams: true,
			Handler: func(_ any, ss grpc.ServerStream) error {
				handled.Add(1)
				for {
					m := new(emptypb.Empty)
					if err := ss.RecvMsg(m); errors.Is(err, io.EOF) {
						return wantCode(ss.Context())
					} else if err != nil {
						return err
					}
					if err := ss.SendMsg(m); err != nil {
						return err
					}
				}
			}}},
	}
}

func wantCode(ctx context.Context) error {
	md, _ := metadata.FromIncomingContext(ctx)
	if v := md.Get("want-code"); len(v) > 0 {
		n, _ := strconv.Atoi(v[0])
		if codes.Code(n) != codes.OK {
			return status.Error(codes.Code(n), "as asked")
		}
	}
	return nil
}

// auth is the service's authentication, as tests play it: the user and
// roles named in the metadata keys x-user and x-roles (comma-separated).
// A real service verifies a token here.
func auth(ctx context.Context) context.Context {
	md, _ := metadata.FromIncomingContext(ctx)
	u := md.Get("x-user")
	if len(u) == 0 {
		return ctx
	}
	id := role.Identity{User: u[0]}
	for _, r := range md.Get("x-roles") {
		for _, s := range strings.Split(r, ",") {
			id.Roles = append(id.Roles, role.Role(s))
		}
	}
	return role.NewContext(ctx, id)
}

type authStream struct {
	grpc.ServerStream
	ctx context.Context
}

func (s authStream) Context() context.Context { return s.ctx }

// cmdCounter counts the commands a go-redis client sends.
type cmdCounter struct{ n atomic.Int64 }

func (c *cmdCounter) DialHook(next redis.DialHook) redis.DialHook { return next }
func (c *cmdCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		c.n.Add(1)
		return next(ctx, cmd)
	}
}
func (c *cmdCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		c.n.Add(int64(len(cmds)))
		return next(ctx, cmds)
	}
}

// fixture is a real grpc-go server on a loopback TCP port, limited by a
// grpclimit.Interceptors over an engine on miniredis (or a real redis-server),
// and a client connection to it.
type fixture struct {
	mr      *miniredis.Miniredis // nil on a real redis-server
	cmds    *cmdCounter
	handled atomic.Int64 // calls that reached a handler
	addr    string
	conn    *grpc.ClientConn
	eng     *engine.Engine

	mu  sync.Mutex
	evs []middleware.Event
}

func (f *fixture) record(ev middleware.Event) {
	f.mu.Lock()
	f.evs = append(f.evs, ev)
	f.mu.Unlock()
}

func (f *fixture) events() []middleware.Event {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.evs)
}

type setup struct {
	backendErrors bool // Redis goes down during the test
	methods       map[string]string
	opts          []grpclimit.Option
	engine        []engine.Option
	redisAddr     string            // a real redis-server; miniredis when empty
	service       *grpc.ServiceDesc // registered beside test.Svc when not nil
}

func newFixture(t testing.TB, s setup) *fixture {
	t.Helper()
	f := &fixture{cmds: &cmdCounter{}}
	addr := s.redisAddr
	if addr == "" {
		f.mr = miniredis.RunT(t)
		addr = f.mr.Addr()
	}
	rc := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, ContextTimeoutEnabled: true})
	rc.AddHook(f.cmds)
	t.Cleanup(func() { rc.Close() })
	// NewEngine's generous timeout: on a loaded machine the default 100 ms
	// can pass, and the fail mode would then admit calls the assertions
	// expect Redis to count.
	f.eng = testutil.NewEngine(t, rc, append([]engine.Option{engine.WithKeyPrefix(redistest.Prefix(t))}, s.engine...)...)
	// Every event is kept; a backend error the test did not provoke fails
	// it, so that no assertion passes on a fail-mode decision by accident.
	opts := append([]grpclimit.Option{grpclimit.WithMiddlewareOptions(middleware.WithHook(f.record))}, s.opts...)
	if !s.backendErrors {
		t.Cleanup(func() {
			for _, ev := range f.events() {
				if ev.Err != nil && errors.Is(ev.Err, engine.ErrBackend) {
					t.Errorf("unexpected backend error for %s: %v", ev.Scope, ev.Err)
				}
			}
		})
	}
	lim, err := grpclimit.New(f.eng, s.methods, opts...)
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(
		grpc.ChainUnaryInterceptor(func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
			return h(auth(ctx), req)
		}, lim.UnaryServerInterceptor()),
		grpc.ChainStreamInterceptor(func(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, h grpc.StreamHandler) error {
			return h(srv, authStream{ss, auth(ss.Context())})
		}, lim.StreamServerInterceptor()),
	)
	srv.RegisterService(svcDesc(&f.handled), nil)
	if s.service != nil {
		srv.RegisterService(s.service, nil)
	}
	healthpb.RegisterHealthServer(srv, health.NewServer())
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(ln)
	t.Cleanup(srv.Stop)
	f.addr = ln.Addr().String()
	f.conn = f.dial(t, "127.0.0.1")
	return f
}

// dial connects to the fixture's server from the loopback address local
// (127.0.0.1, 127.0.0.2, ...: Linux answers the whole 127/8), so that tests
// can be different clients by IP; extra adds dial options.
func (f *fixture) dial(t testing.TB, local string, extra ...grpc.DialOption) *grpc.ClientConn {
	t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(local)}}
	opts := append([]grpc.DialOption{
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) {
			return d.DialContext(ctx, "tcp", addr)
		}),
	}, extra...)
	conn, err := grpc.NewClient("passthrough:///"+f.addr, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// call is one unary call's outcome.
type call struct {
	err     error
	header  metadata.MD
	trailer metadata.MD
}

func (c call) code() codes.Code { return status.Code(c.err) }

// invoke calls method on conn with the metadata pairs kv (x-user,
// x-roles, want-code, x-forwarded-for, ...).
func invoke(t testing.TB, conn *grpc.ClientConn, method string, kv ...string) call {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ctx = metadata.AppendToOutgoingContext(ctx, kv...)
	var c call
	c.err = conn.Invoke(ctx, method, &emptypb.Empty{}, &emptypb.Empty{}, grpc.Header(&c.header), grpc.Trailer(&c.trailer))
	return c
}

// stream opens a Chat stream on conn, sends n messages, and returns the
// stream's status and how many messages came back.
func stream(t testing.TB, conn *grpc.ClientConn, n int, kv ...string) (error, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ctx = metadata.AppendToOutgoingContext(ctx, kv...)
	cs, err := conn.NewStream(ctx, &chatDesc, chat)
	if err != nil {
		return err, 0
	}
	for range n {
		if err := cs.SendMsg(&emptypb.Empty{}); err != nil {
			break // the status comes with RecvMsg
		}
	}
	_ = cs.CloseSend()
	got := 0
	for {
		if err := cs.RecvMsg(new(emptypb.Empty)); err != nil {
			if errors.Is(err, io.EOF) {
				return nil, got
			}
			return err, got
		}
		got++
	}
}

// readStream opens a server stream of method on conn, sends one Empty,
// and reads the stream to its end into messages of newMsg; it returns nil
// when the stream ended with OK.
func readStream(ctx context.Context, conn *grpc.ClientConn, method string, newMsg func() any) error {
	cs, err := conn.NewStream(ctx, &grpc.StreamDesc{ServerStreams: true}, method)
	if err != nil {
		return err
	}
	if err := cs.SendMsg(&emptypb.Empty{}); err != nil {
		return err
	}
	_ = cs.CloseSend()
	for {
		if err := cs.RecvMsg(newMsg()); err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		}
	}
}

// offlineEngine returns an engine that is never asked: New does not
// contact Redis.
func offlineEngine(t testing.TB) *engine.Engine {
	t.Helper()
	rc := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", ContextTimeoutEnabled: true})
	t.Cleanup(func() { rc.Close() })
	return testutil.NewEngine(t, rc)
}

// allowOnly hides every method of its engine but Allow.
type allowOnly struct{ e *engine.Engine }

func (a allowOnly) Allow(ctx context.Context, req engine.Request) (engine.Decision, error) {
	return a.e.Allow(ctx, req)
}

// configError returns the first *middleware.ConfigError of kind in err's
// tree, or nil: errors.As would stop at the first ConfigError of a joined
// list.
func configError(err error, kind string) *middleware.ConfigError {
	switch e := err.(type) {
	case *middleware.ConfigError:
		if e.Kind == kind {
			return e
		}
		return configError(e.Err, kind)
	case interface{ Unwrap() []error }:
		for _, u := range e.Unwrap() {
			if ce := configError(u, kind); ce != nil {
				return ce
			}
		}
	case interface{ Unwrap() error }:
		return configError(e.Unwrap(), kind)
	}
	return nil
}
