package grpclimit_test

import (
	"context"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/emptypb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/slidelimit/slidelimit/contrib/grpclimit"
	"github.com/slidelimit/slidelimit/middleware"
)

// Service settle.Svc, described by hand: Get is unary, Download a server
// stream, both answering with BytesValues of x-size bytes (Download sends
// x-msgs of them). A handler reports x-report as the actual cost of
// bytes, with middleware.ReportCost when x-via is http, and fails with
// FailedPrecondition when there was nothing to report to; then it answers
// with want-code.
const (
	sGet      = "/settle.Svc/Get"
	sDownload = "/settle.Svc/Download"
)

func settleSvc() *grpc.ServiceDesc {
	handle := func(ctx context.Context) error {
		md, _ := metadata.FromIncomingContext(ctx)
		if v := first(md.Get("x-report")); v != "" {
			n, _ := strconv.ParseInt(v, 10, 64)
			report := middleware.ReportCost
			if first(md.Get("x-via")) == "http" {
				report = middleware.ReportCost
			}
			if !report(ctx, "bytes", n) {
				return status.Error(codes.FailedPrecondition, "no settlement to report to")
			}
		}
		return nil
	}
	msg := func(ctx context.Context) *wrapperspb.BytesValue {
		md, _ := metadata.FromIncomingContext(ctx)
		n, _ := strconv.Atoi(first(md.Get("x-size")))
		return wrapperspb.Bytes(make([]byte, n))
	}
	return &grpc.ServiceDesc{
		ServiceName: "settle.Svc",
		HandlerType: (*any)(nil),
		Methods: []grpc.MethodDesc{{MethodName: "Get", Handler: func(_ any, ctx context.Context, dec func(any) error, icpt grpc.UnaryServerInterceptor) (any, error) {
			if err := dec(new(emptypb.Empty)); err != nil {
				return nil, err
			}
			return icpt(ctx, nil, &grpc.UnaryServerInfo{FullMethod: sGet}, func(ctx context.Context, _ any) (any, error) {
				if err := handle(ctx); err != nil {
					return nil, err
				}
				return msg(ctx), wantCode(ctx)
			})
		}}},
		Streams: []grpc.StreamDesc{{StreamName: "Download", ServerStreams: true, Handler: func(_ any, ss grpc.ServerStream) error {
			if err := ss.RecvMsg(new(emptypb.Empty)); err != nil {
				return err
			}
			ctx := ss.Context()
			if err := handle(ctx); err != nil {
				return err
			}
			md, _ := metadata.FromIncomingContext(ctx)
			n, _ := strconv.Atoi(first(md.Get("x-msgs")))
			for range n {
				if err := ss.SendMsg(msg(ctx)); err != nil {
					return err
				}
			}
			return wantCode(ctx)
		}}},
	}
}

// settleFixture serves settle.Svc whose methods share the windows of
// rulesText (scope dl), with a cost function bytes that estimates 100 per
// call, settled as s.
func settleFixture(t *testing.T, redisAddr, rulesText string, s middleware.Settlement) *fixture {
	t.Helper()
	text := rulesText + "; scope:dl"
	return newFixture(t, setup{
		methods:   map[string]string{sGet: text, sDownload: text},
		service:   settleSvc(),
		redisAddr: redisAddr,
		opts: []grpclimit.Option{
			grpclimit.WithCostFunc("bytes", func(context.Context, string, any) (int64, error) { return 100, nil }),
			grpclimit.WithMiddlewareOptions(middleware.WithSettle("bytes", s)),
		},
	})
}

var remainingRE = regexp.MustCompile(`;r=(\d+)`)

// get calls Get as alice with the metadata pairs kv, and returns the
// remaining bytes that its admission advertised (-1 for none).
func get(t *testing.T, f *fixture, kv ...string) (codes.Code, int64) {
	t.Helper()
	c := invoke(t, f.conn, sGet, append([]string{"x-user", "alice"}, kv...)...)
	md := c.header
	if c.err != nil {
		md = c.trailer
	}
	m := remainingRE.FindStringSubmatch(strings.Join(md.Get("ratelimit"), ","))
	if m == nil {
		return c.code(), -1
	}
	n, _ := strconv.ParseInt(m[1], 10, 64)
	return c.code(), n
}

// download reads a Download stream as alice with the metadata pairs kv.
func download(t *testing.T, f *fixture, kv ...string) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ctx = metadata.AppendToOutgoingContext(ctx, append([]string{"x-user", "alice"}, kv...)...)
	return readStream(ctx, f.conn, sDownload, func() any { return new(wrapperspb.BytesValue) })
}

// A settle step is one call and what the next call's admission must
// advertise: the window's limit 10,000, minus what the earlier calls
// count, minus the next call's own estimate of 100.
type settleStep struct {
	stream bool
	kv     []string
	want   codes.Code
	// counted is what the window counts after this call: after a probe
	// (a Get that reports nothing, kv empty), the remaining it advertised
	// is 10,000 - counted.
	counted int64
}

// runSettle runs steps on f, probing the window after each.
func runSettle(t *testing.T, f *fixture, steps []settleStep) {
	t.Helper()
	for i, s := range steps {
		var code codes.Code
		if s.stream {
			code = status.Code(download(t, f, s.kv...))
		} else {
			code, _ = get(t, f, s.kv...)
		}
		if code != s.want {
			t.Fatalf("step %d %v: %v, want %v", i, s.kv, code, s.want)
		}
		// The finish runs after the response: wait for it to show.
		want := 10000 - s.counted - 100
		deadline := time.Now().Add(5 * time.Second)
		for {
			_, r := get(t, f, "x-report", "0") // the probe, settled to 0
			if r == want {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("step %d %v: the next call's admission left %d, want %d", i, s.kv, r, want)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
}

// TestSettleReported: calls settle to the cost their handler reported
// (middleware.ReportCost, or middleware.ReportCost on the same context),
// unary and streams; a call that reports nothing keeps its estimate of
// 100; a call given back by count: counts nothing, settled or not.
func TestSettleReported(t *testing.T) {
	t.Parallel()
	backends(t, func(t *testing.T, redisAddr string) {
		f := settleFixture(t, redisAddr, "user[bytes]:10000/min; count:OK,INTERNAL", middleware.Settlement{})
		runSettle(t, f, []settleStep{
			{kv: []string{"x-report", "30"}, counted: 30},
			{counted: 130}, // nothing reported: the estimate stays
			{kv: []string{"x-report", "7", "x-via", "http"}, counted: 137},
			{stream: true, kv: []string{"x-report", "40", "x-msgs", "2"}, counted: 177},
			{stream: true, kv: []string{"x-msgs", "2"}, counted: 277},
			{kv: []string{"x-report", "5", "want-code", "13"}, want: codes.Internal, counted: 282}, // listed in count:
			{kv: []string{"x-report", "5", "want-code", "5"}, want: codes.NotFound, counted: 282},  // given back
			{stream: true, kv: []string{"x-report", "5", "want-code", "5"}, want: codes.NotFound, counted: 282},
		})
	})
}

// TestSettleWritten: with Settlement.Written, a call that reports nothing
// settles to the serialized size of the messages it sent: a unary call's
// response (nothing when it fails), every message of a stream; a reported
// cost wins.
func TestSettleWritten(t *testing.T) {
	t.Parallel()
	f := settleFixture(t, "", "user[bytes]:10000/min", middleware.Settlement{Written: true})
	size := int64(proto.Size(wrapperspb.Bytes(make([]byte, 40))))
	if size != 42 {
		t.Fatalf("a BytesValue of 40 bytes encodes in %d bytes, want 42 (tag, length, bytes)", size)
	}
	runSettle(t, f, []settleStep{
		{kv: []string{"x-size", "40"}, counted: size},
		{kv: []string{"x-size", "40", "x-report", "5"}, counted: size + 5},
		{kv: []string{"x-size", "40", "want-code", "13"}, want: codes.Internal, counted: size + 5},
		{stream: true, kv: []string{"x-size", "40", "x-msgs", "3"}, counted: 4*size + 5},
		{stream: true, kv: []string{"x-size", "40", "x-msgs", "3", "x-report", "1"}, counted: 4*size + 6},
	})
}

// TestSettleMaxDebt: a call that reports more than its estimate of 100 is
// charged the excess, at most MaxDebt of it, none with NoDebt.
func TestSettleMaxDebt(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		debt    int64
		counted int64
	}{{0, 250}, {50, 150}, {-1, 100}, {1000, 250}} {
		t.Run(strconv.FormatInt(tc.debt, 10), func(t *testing.T) {
			t.Parallel()
			f := settleFixture(t, "", "user[bytes]:10000/min", middleware.Settlement{MaxDebt: tc.debt})
			runSettle(t, f, []settleStep{
				{kv: []string{"x-report", "250"}, counted: tc.counted},
				{stream: true, kv: []string{"x-report", "250"}, counted: 2 * tc.counted},
			})
		})
	}
}

// TestSettleNotAwaited: ReportCost finds nothing to report to in a method
// whose group settles nothing, and outside a call.
func TestSettleNotAwaited(t *testing.T) {
	t.Parallel()
	f := newFixture(t, setup{
		methods: map[string]string{sGet: "user:5/min", sDownload: "user[rows]:500/min"},
		service: settleSvc(),
		opts: []grpclimit.Option{
			grpclimit.WithCostFunc("rows", func(context.Context, string, any) (int64, error) { return 1, nil }),
			grpclimit.WithMiddlewareOptions(middleware.WithSettle("bytes", middleware.Settlement{})),
		},
	})
	if code, _ := get(t, f, "x-report", "1"); code != codes.FailedPrecondition {
		t.Errorf("ReportCost in an unsettled method: %v, want FailedPrecondition (it returned false)", code)
	}
	if err := download(t, f, "x-report", "1"); status.Code(err) != codes.FailedPrecondition {
		t.Errorf("ReportCost in a stream settling another cost: %v, want FailedPrecondition", err)
	}
	if middleware.ReportCost(context.Background(), "bytes", 1) {
		t.Error("ReportCost outside a call returned true")
	}
}

// TestSettleOptions: WithSettle's errors are *middleware.ConfigError
// naming the option and the name, and New refuses a decider that cannot
// settle.
func TestSettleOptions(t *testing.T) {
	t.Parallel()
	eng := offlineEngine(t)
	costs := grpclimit.WithCostFunc("bytes", func(context.Context, string, any) (int64, error) { return 1, nil })
	for _, tc := range []struct {
		name   string
		s      middleware.Settlement
		reason string
	}{
		{"", middleware.Settlement{}, "invalid cost function name"},
		{"9bytes", middleware.Settlement{}, "invalid cost function name"},
		{"by tes", middleware.Settlement{}, "invalid cost function name"},
		{"bytes", middleware.Settlement{MaxDebt: -2}, "MaxDebt below -1"},
	} {
		_, err := grpclimit.New(eng, map[string]string{sGet: "user[bytes]:5/min"}, costs, grpclimit.WithMiddlewareOptions(middleware.WithSettle(tc.name, tc.s)))
		ce := configError(err, "option")
		if ce == nil || ce.Option != "WithSettle" || ce.Name != tc.name || !strings.Contains(ce.Reason, tc.reason) {
			t.Errorf("WithSettle(%q, %+v): error %v, want a ConfigError of WithSettle for %q: %s", tc.name, tc.s, err, tc.name, tc.reason)
		}
	}
	_, err := grpclimit.New(allowOnly{eng}, map[string]string{sGet: "user[bytes]:5/min"}, costs, grpclimit.WithMiddlewareOptions(middleware.WithSettle("bytes", middleware.Settlement{})))
	if configError(err, "decider") == nil {
		t.Errorf("a decider that cannot settle: error %v, want a *middleware.ConfigError of the decider", err)
	}
	if _, err := grpclimit.New(eng, map[string]string{sGet: "user[bytes]:5/min"}, costs,
		grpclimit.WithMiddlewareOptions(middleware.WithSettle("bytes", middleware.Settlement{MaxDebt: -1, Written: true}))); err != nil {
		t.Errorf("a valid settlement: %v", err)
	}
}
