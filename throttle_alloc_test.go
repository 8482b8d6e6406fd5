package slidelimit_test

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/slidelimit/slidelimit"
	"github.com/slidelimit/slidelimit/internal/redistest"
)

// okTransport answers every request 200 with a short body, sending
// nothing.
type okTransport struct{}

func (okTransport) RoundTrip(*http.Request) (*http.Response, error) {
	return &http.Response{StatusCode: http.StatusOK, Header: http.Header{}, Body: io.NopCloser(strings.NewReader("ok"))}, nil
}

// BenchmarkThrottlePermit measures a throttled call that never waits, on
// a redis-server: Wait then Finish, Allow then Finish, and a round trip
// through Transport to a base that sends nothing. Its allocations per
// call are the throttle's own plus the engine's decision.
func BenchmarkThrottlePermit(b *testing.B) {
	srv := redistest.Start(b)
	lim, err := slidelimit.New(srv.Client())
	if err != nil {
		b.Fatal(err)
	}
	defer lim.Close()
	th, err := lim.Throttle("bench", "key(k):100000/ms; key(k)[tokens]:100000/ms")
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	c := slidelimit.Call{Keys: map[string]string{"k": "a"}, Costs: map[string]int64{"tokens": 10}}
	actual := map[string]int64{"tokens": 5}
	b.Run("wait-finish", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			p, err := th.Wait(ctx, c)
			if err != nil {
				b.Fatal(err)
			}
			p.Finish(actual)
		}
	})
	b.Run("allow-finish", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			p, ok, err := th.Allow(ctx, c)
			if err != nil || !ok {
				b.Fatal(ok, err)
			}
			p.Finish(nil)
		}
	})
	b.Run("transport", func(b *testing.B) {
		rt := th.Transport(okTransport{}, slidelimit.WithCall(func(*http.Request) (slidelimit.Call, error) { return c, nil }))
		req, _ := http.NewRequest(http.MethodGet, "http://upstream.invalid/", nil)
		b.ReportAllocs()
		for b.Loop() {
			resp, err := rt.RoundTrip(req)
			if err != nil {
				b.Fatal(err)
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			_ = resp.Body.Close()
		}
	})
}
