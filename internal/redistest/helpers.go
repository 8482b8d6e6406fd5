package redistest

import (
	"crypto/rand"
	"encoding/hex"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
)

// Prefix returns a random key prefix, so tests sharing a server never see
// each other's keys.
func Prefix(tb testing.TB) string {
	var b [6]byte
	rand.Read(b[:])
	return "t" + hex.EncodeToString(b[:]) + ":"
}

// StartClient starts a redis-server for the test and returns it with a
// client, both closed when the test ends.
func StartClient(tb testing.TB) (*Server, *redis.Client) {
	tb.Helper()
	s := Start(tb)
	return s, s.Client()
}

// Mini starts a miniredis for the test and returns it with a client, both
// closed when the test ends.
func Mini(tb testing.TB) (*miniredis.Miniredis, *redis.Client) {
	tb.Helper()
	m := miniredis.RunT(tb)
	c := redis.NewClient(&redis.Options{Addr: m.Addr()})
	tb.Cleanup(func() { c.Close() })
	return m, c
}

// Epoch is where a new Clock starts: a fixed instant, so that tests
// driven by a Clock see the same times on every run.
var Epoch = time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)

// Clock is a clock the test sets, to pass as engine.WithClock(c.Now). It
// counts whole microseconds and is safe for concurrent use.
type Clock struct{ us atomic.Int64 }

// NewClock returns a Clock reading Epoch.
func NewClock() *Clock {
	c := &Clock{}
	c.us.Store(Epoch.UnixMicro())
	return c
}

// Now returns the clock's time.
func (c *Clock) Now() time.Time { return time.UnixMicro(c.us.Load()) }

// Set sets the clock to Epoch plus d.
func (c *Clock) Set(d time.Duration) { c.us.Store(Epoch.Add(d).UnixMicro()) }

// SetTime sets the clock to t.
func (c *Clock) SetTime(t time.Time) { c.us.Store(t.UnixMicro()) }

// Add moves the clock on by d.
func (c *Clock) Add(d time.Duration) { c.us.Add(d.Microseconds()) }

// Eventually polls cond every 5 ms until it holds and returns how long
// that took. It fails the test after 10 s: generous, so that a loaded
// machine is not mistaken for a bug.
func Eventually(tb testing.TB, what string, cond func() bool) time.Duration {
	tb.Helper()
	start := time.Now()
	for !cond() {
		if time.Since(start) > 10*time.Second {
			tb.Fatalf("not so within 10 s: %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
	return time.Since(start)
}

// RefusedAddr is a loopback address nothing listens on, so that a call
// there is refused at once: port 1, which no test's server takes (they
// take ephemeral ports). An ephemeral port found free and closed is no
// such address: a parallel test's redis-server may take it.
const RefusedAddr = "127.0.0.1:1"

// Goroutines counts the goroutines whose stack holds in, such as a
// package's path and "(*" for its methods: a test checks that what it
// started has ended.
func Goroutines(in string) int {
	buf := make([]byte, 1<<22)
	buf = buf[:runtime.Stack(buf, true)]
	n := 0
	for _, g := range strings.Split(string(buf), "\n\n") {
		if strings.Contains(g, in) {
			n++
		}
	}
	return n
}
