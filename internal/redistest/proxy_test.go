package redistest_test

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"runtime"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/slidelimit/slidelimit/internal/redistest"
)

// through returns a client of addr that neither retries nor pools many
// connections, closed when the test ends.
func through(t *testing.T, addr string) *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, PoolSize: 2, ContextTimeoutEnabled: true})
	t.Cleanup(func() { c.Close() })
	return c
}

// pings returns the round-trip times of n sequential PINGs.
func pings(t *testing.T, c *redis.Client, n int) []time.Duration {
	t.Helper()
	ctx := context.Background()
	if err := c.Ping(ctx).Err(); err != nil { // dial outside the samples
		t.Fatal(err)
	}
	rtts := make([]time.Duration, n)
	for i := range rtts {
		start := time.Now()
		if err := c.Ping(ctx).Err(); err != nil {
			t.Fatal(err)
		}
		rtts[i] = time.Since(start)
	}
	return rtts
}

func TestProxyDelay(t *testing.T) {
	t.Parallel()
	s := redistest.Start(t)
	const lo, hi = 30 * time.Millisecond, 80 * time.Millisecond
	// A round trip is never shorter than twice the minimum. On a loaded
	// machine (load 7 on 2 cores, with -race) single round trips took up
	// to 2×max + 220ms, so the maximum is checked on the median, and
	// every round trip only against slack.
	const slack = time.Second
	t.Run("jitter", func(t *testing.T) {
		t.Parallel()
		p := redistest.StartProxy(t, s.Addr, lo, hi)
		rtts := pings(t, through(t, p.Addr), 31)
		for i, d := range rtts {
			if d < 2*lo || d > 2*hi+slack {
				t.Errorf("ping %d took %v, want %v to %v", i, d, 2*lo, 2*hi+slack)
			}
		}
		sorted := slices.Sorted(slices.Values(rtts))
		if median := sorted[len(sorted)/2]; median > 2*hi {
			t.Errorf("median round trip %v, want at most %v", median, 2*hi)
		}
		if spread := sorted[len(sorted)-1] - sorted[0]; spread < 5*time.Millisecond {
			t.Errorf("round trips spread over %v only (%v): no jitter", spread, rtts)
		}
	})
	t.Run("fixed", func(t *testing.T) {
		t.Parallel()
		p := redistest.StartProxy(t, s.Addr, 40*time.Millisecond, 40*time.Millisecond)
		c := through(t, p.Addr)
		rtts := pings(t, c, 11)
		for i, d := range rtts {
			if d < 80*time.Millisecond || d > 80*time.Millisecond+slack {
				t.Errorf("ping %d took %v, want 80ms to %v", i, d, 80*time.Millisecond+slack)
			}
		}
		if median := slices.Sorted(slices.Values(rtts))[len(rtts)/2]; median > 100*time.Millisecond {
			t.Errorf("median round trip %v, want 80ms to 100ms", median)
		}
		// A lag spike applies to what is read after it.
		p.SetDelay(200*time.Millisecond, 200*time.Millisecond)
		for i, d := range pings(t, c, 2) {
			if d < 400*time.Millisecond {
				t.Errorf("ping %d after SetDelay took %v, want at least 400ms", i, d)
			}
		}
	})
}

// echo starts a TCP server that writes back what it reads, closed when the
// test ends, and returns its address.
func echo(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	t.Cleanup(func() { ln.Close(); wg.Wait() })
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer c.Close()
				io.Copy(c, c)
			}()
		}
	}()
	return ln.Addr().String()
}

// TestProxyOrder writes numbered records one write at a time through a
// proxy whose jitter exceeds the gap between writes, and reads them back
// in order.
func TestProxyOrder(t *testing.T) {
	t.Parallel()
	p := redistest.StartProxy(t, echo(t), 0, 20*time.Millisecond)
	c, err := net.Dial("tcp", p.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	const n = 2000
	errc := make(chan error, 1)
	go func() {
		for i := range uint32(n) {
			if _, err := c.Write(binary.BigEndian.AppendUint32(nil, i)); err != nil {
				errc <- err
				return
			}
			if i%100 == 0 {
				time.Sleep(time.Millisecond) // let chunks be read apart
			}
		}
		errc <- c.(*net.TCPConn).CloseWrite()
	}()
	c.SetReadDeadline(time.Now().Add(30 * time.Second))
	r := bufio.NewReader(c)
	var rec [4]byte
	for i := range uint32(n) {
		if _, err := io.ReadFull(r, rec[:]); err != nil {
			t.Fatalf("record %d: %v", i, err)
		}
		if got := binary.BigEndian.Uint32(rec[:]); got != i {
			t.Fatalf("record %d read as %d: reordered", i, got)
		}
	}
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	// The half-close reaches the server, whose close comes back.
	if _, err := r.ReadByte(); err != io.EOF {
		t.Fatalf("after the records: %v, want EOF", err)
	}
}

func TestProxyCutAndHeal(t *testing.T) {
	t.Parallel()
	s := redistest.Start(t)
	direct := s.Client()
	p := redistest.StartProxy(t, s.Addr, 30*time.Millisecond, 80*time.Millisecond)
	c := through(t, p.Addr)
	ctx := context.Background()
	if err := c.Ping(ctx).Err(); err != nil {
		t.Fatal(err)
	}

	// A call in flight fails at once, long before its own timeout.
	errc := make(chan error, 1)
	go func() { errc <- c.BLPop(ctx, 20*time.Second, "never").Err() }()
	// Wait until the BLPOP has reached the server and blocks there.
	for deadline := time.Now().Add(10 * time.Second); ; {
		info, err := direct.Info(ctx, "clients").Result()
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(info, "blocked_clients:1\r\n") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the BLPOP did not block on the server within 10s:\n%s", info)
		}
		time.Sleep(10 * time.Millisecond)
	}
	start := time.Now()
	p.Cut()
	select {
	case err := <-errc:
		if err == nil || errors.Is(err, redis.Nil) {
			t.Fatalf("BLPOP across the cut: %v, want a connection error", err)
		}
		if took := time.Since(start); took > 5*time.Second {
			t.Errorf("BLPOP failed %v after the cut", took)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("BLPOP still blocked 15s after the cut")
	}
	if !p.IsCut() {
		t.Fatal("IsCut false after Cut")
	}

	// A new call stalls until its own deadline, and nothing it wrote
	// reaches the server, then or after Heal.
	short, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
	start = time.Now()
	err := c.Set(short, "written-while-cut", "x", 0).Err()
	cancel()
	if err == nil {
		t.Fatal("SET through a cut proxy succeeded")
	}
	if took := time.Since(start); took < 400*time.Millisecond {
		t.Errorf("SET through a cut proxy failed after %v (%v), want a stall until its deadline", took, err)
	}

	p.Heal()
	if p.IsCut() {
		t.Fatal("IsCut true after Heal")
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		err := c.Ping(ctx).Err()
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("ping 10s after Heal: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if n, err := direct.Exists(ctx, "written-while-cut").Result(); err != nil || n != 0 {
		t.Fatalf("key written while cut: exists=%d err=%v, want 0 <nil>", n, err)
	}
}

// TestProxyCloseLeavesNoGoroutine is not parallel: it counts the
// process's goroutines.
func TestProxyCloseLeavesNoGoroutine(t *testing.T) {
	s := redistest.Start(t)
	ctx := context.Background()
	warm := redis.NewClient(&redis.Options{Addr: s.Addr})
	warm.Ping(ctx)
	warm.Close()
	before := runtime.NumGoroutine()

	p, err := redistest.NewProxy(s.Addr, 10*time.Millisecond, 20*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	c := redis.NewClient(&redis.Options{Addr: p.Addr, MaxRetries: -1, ContextTimeoutEnabled: true})
	for range 5 {
		if err := c.Ping(ctx).Err(); err != nil {
			t.Fatal(err)
		}
	}
	// A connection stalled behind a cut proxy, and one with a chunk
	// waiting out a long delay.
	cut, err := redistest.NewProxy(s.Addr, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	cut.Cut()
	stalled, err := net.Dial("tcp", cut.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer stalled.Close()
	p.SetDelay(time.Minute, time.Minute)
	slow, err := net.Dial("tcp", p.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer slow.Close()
	if _, err := slow.Write([]byte("PING\r\n")); err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond)

	start := time.Now()
	cut.Close()
	p.Close()
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("Close took %v with a chunk delayed a minute", took)
	}
	p.Close() // twice is fine
	// Close closed the proxy's end of every connection, stalled or not.
	for name, conn := range map[string]net.Conn{"stalled": stalled, "delayed": slow} {
		conn.SetReadDeadline(time.Now().Add(5 * time.Second))
		if _, err := conn.Read(make([]byte, 64)); !errors.Is(err, io.EOF) && !errors.Is(err, syscall.ECONNRESET) {
			t.Errorf("the %s connection after Close: %v, want EOF or a reset", name, err)
		}
	}
	c.Close()
	stalled.Close()
	slow.Close()
	deadline := time.Now().Add(10 * time.Second)
	for runtime.NumGoroutine() > before && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if n := runtime.NumGoroutine(); n > before {
		buf := make([]byte, 1<<20)
		t.Fatalf("%d goroutines after Close, %d before:\n%s", n, before, buf[:runtime.Stack(buf, true)])
	}
	if _, err := net.DialTimeout("tcp", p.Addr, time.Second); err == nil {
		t.Error("the proxy still accepts after Close")
	}
}

func TestRegions(t *testing.T) {
	t.Parallel()
	r := redistest.StartRegions(t, 3, 30*time.Millisecond, 80*time.Millisecond)
	ctx := context.Background()
	for i := range 3 {
		if err := r.Local(i).Set(ctx, "region", i, 0).Err(); err != nil {
			t.Fatal(err)
		}
	}
	peer := func(from, to int) *redis.Client {
		c := through(t, r.Link(from, to).Addr)
		return c
	}
	// Each region reaches each other's own server, with the delay.
	for from := range 3 {
		for to := range 3 {
			if from == to {
				if r.Link(from, to) != nil {
					t.Errorf("Link(%d, %d) is not nil", from, to)
				}
				continue
			}
			start := time.Now()
			got, err := r.Peer(from, to).Get(ctx, "region").Int()
			if err != nil || got != to {
				t.Fatalf("region %d reading region %d: %d, %v", from, to, got, err)
			}
			if took := time.Since(start); took < 60*time.Millisecond {
				t.Errorf("region %d reached region %d in %v, want at least 60ms", from, to, took)
			}
		}
	}

	// Cut region 0: its links fail both ways, the others' still work.
	c10, c01, c12 := peer(1, 0), peer(0, 1), peer(1, 2)
	for _, c := range []*redis.Client{c10, c01, c12} {
		if err := c.Ping(ctx).Err(); err != nil {
			t.Fatal(err)
		}
	}
	r.Cut(0)
	short := func(c *redis.Client) error {
		ctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
		defer cancel()
		return c.Ping(ctx).Err()
	}
	if short(c10) == nil || short(c01) == nil {
		t.Fatal("a link of the cut region still answers")
	}
	if err := short(c12); err != nil {
		t.Fatalf("regions 1 and 2 during the cut of 0: %v", err)
	}
	// Healing region 1, which is not cut, leaves region 0 cut.
	r.Cut(1)
	r.Heal(1)
	if !r.Link(1, 0).IsCut() || !r.Link(0, 1).IsCut() || r.Link(1, 2).IsCut() {
		t.Fatal("Heal(1) healed a link of region 0, still cut")
	}
	r.Heal(0)
	for _, c := range []*redis.Client{c10, c01, c12} {
		deadline := time.Now().Add(10 * time.Second)
		for short(c) != nil {
			if time.Now().After(deadline) {
				t.Fatal("a link still fails 10s after Heal")
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
}
