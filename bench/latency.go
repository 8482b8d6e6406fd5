package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/slidelimit/slidelimit/engine"
	"github.com/slidelimit/slidelimit/middleware"
	"github.com/slidelimit/slidelimit/rules"
)

// The latency probe (-latency) measures what a client of the HTTP
// middleware waits for, with Redis behind a TCP proxy that delays each
// direction by -latency-delay (another zone): the p50 of sequential GETs of
// a route whose requests hold a slot and are settled to the bytes written,
// against the same route without the in-flight window and settlement. A
// response waits for its admission's round trip only: the finish after the
// handler is queued (engine.Engine.FinishAsync). The third row finishes
// with the synchronous Finish, as the middleware did before, for
// comparison.

// delayProxy forwards TCP connections to target, each chunk delayed by d
// in each direction, in order.
type delayProxy struct {
	l      net.Listener
	target string
	d      time.Duration
	wg     sync.WaitGroup
}

func startDelayProxy(target string, d time.Duration) (*delayProxy, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &delayProxy{l: l, target: target, d: d}
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

func (p *delayProxy) Addr() string { return p.l.Addr().String() }

func (p *delayProxy) Close() { p.l.Close(); p.wg.Wait() }

func (p *delayProxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.l.Accept()
		if err != nil {
			return
		}
		s, err := net.Dial("tcp", p.target)
		if err != nil {
			c.Close()
			continue
		}
		go p.pipe(c, s)
		go p.pipe(s, c)
	}
}

// pipe copies from src to dst, each chunk d after it was read.
func (p *delayProxy) pipe(src, dst net.Conn) {
	type chunk struct {
		b  []byte
		at time.Time
	}
	ch := make(chan chunk, 1024)
	go func() {
		defer close(ch)
		for {
			b := make([]byte, 32<<10)
			n, err := src.Read(b)
			if n > 0 {
				ch <- chunk{b[:n], time.Now().Add(p.d)}
			}
			if err != nil {
				return
			}
		}
	}()
	for c := range ch {
		time.Sleep(time.Until(c.at))
		if _, err := dst.Write(c.b); err != nil {
			break
		}
	}
	src.Close()
	dst.Close()
}

// syncOnly finishes with the synchronous Finish, which the response
// waits for: its FinishAsync, the middleware's one finish seam, calls
// engine.Engine.Finish.
type syncOnly struct{ e *engine.Engine }

func (s syncOnly) Allow(ctx context.Context, r engine.Request) (engine.Decision, error) {
	return s.e.Allow(ctx, r)
}

func (s syncOnly) FinishAsync(d engine.Decision, o engine.Outcome) {
	_ = s.e.Finish(context.Background(), d, o)
}

// latencyProbe runs the probe against the Redis at addr and prints its
// table.
func latencyProbe(addr string, delay time.Duration, n int) error {
	px, err := startDelayProxy(addr, delay)
	if err != nil {
		return err
	}
	defer px.Close()
	rdb := redis.NewClient(&redis.Options{Addr: px.Addr(), PoolSize: 16})
	defer rdb.Close()
	eng, err := engine.New(rdb, engine.WithTimeout(time.Second))
	if err != nil {
		return err
	}
	defer eng.Close()
	body := make([]byte, 4<<10)
	handler := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.Write(body) })
	bytesCost := middleware.WithCostFunc("bytes", func(*http.Request) (int64, error) { return 1 << 20, nil })
	mk := func(text string, d middleware.Decider, scope string, opts ...middleware.Option) (http.Handler, error) {
		mw, err := middleware.New(rules.MustParse(text), d, append(opts, middleware.WithScope(scope), bytesCost)...)
		if err != nil {
			return nil, err
		}
		return mw(handler), nil
	}
	type route struct {
		name string
		h    http.Handler
	}
	settle := middleware.WithSettle("bytes", middleware.Settlement{Written: true})
	var routes []route
	for _, r := range []struct {
		name, text string
		d          middleware.Decider
		opts       []middleware.Option
	}{
		{"plain (no slot, no settlement)", "ip:100000/min; ip[bytes]:100Gi/d", eng, nil},
		{"slot + settlement, FinishAsync", "ip:100000/min,4 concurrent; ip[bytes]:100Gi/d", eng, []middleware.Option{settle}},
		{"slot + settlement, Finish (sync)", "ip:100000/min,4 concurrent; ip[bytes]:100Gi/d", syncOnly{eng}, []middleware.Option{settle}},
	} {
		h, err := mk(r.text, r.d, fmt.Sprint("lat", len(routes)), r.opts...)
		if err != nil {
			return err
		}
		routes = append(routes, route{r.name, h})
	}
	srvs := make([]*httptest.Server, len(routes))
	for i, r := range routes {
		srvs[i] = httptest.NewServer(r.h)
		defer srvs[i].Close()
	}
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 4}}
	get := func(url string) (time.Duration, error) {
		start := time.Now()
		res, err := client.Get(url)
		if err != nil {
			return 0, err
		}
		_, err = io.Copy(io.Discard, res.Body)
		res.Body.Close()
		if res.StatusCode != 200 {
			return 0, fmt.Errorf("status %d", res.StatusCode)
		}
		return time.Since(start), err
	}
	lat := make([][]time.Duration, len(routes))
	for i := range n + 20 { // interleaved, the first 20 rounds a warm-up
		for j := range routes {
			d, err := get(srvs[j].URL)
			if err != nil {
				return fmt.Errorf("%s: %w", routes[j].name, err)
			}
			if i >= 20 {
				lat[j] = append(lat[j], d)
			}
		}
	}
	fmt.Printf("Latency probe: %d sequential GETs per route, interleaved, Redis behind a proxy delaying each direction %v.\n\n", n, delay)
	fmt.Println("| route | p50 | p90 | p50 / plain |")
	fmt.Println("|---|---:|---:|---:|")
	p50 := func(ds []time.Duration) time.Duration { slices.Sort(ds); return ds[len(ds)/2] }
	base := p50(lat[0])
	for j, r := range routes {
		m := p50(lat[j])
		fmt.Printf("| %s | %v | %v | %.2f× |\n", r.name, m.Round(time.Microsecond), lat[j][len(lat[j])*9/10].Round(time.Microsecond), float64(m)/float64(base))
	}
	return nil
}
