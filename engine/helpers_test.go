package engine

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/slidelimit/slidelimit/internal/redistest"
	"github.com/slidelimit/slidelimit/rules"
)

// scanner is a client whose keys can be listed: a single server, or every
// master of a cluster.
type scanner interface {
	Scan(ctx context.Context, cursor uint64, match string, count int64) *redis.ScanCmd
	PTTL(ctx context.Context, key string) *redis.DurationCmd
}

// scanKeys lists the keys under prefix. The denial tallies' keys
// (prefix{tally}:..., written about once a second) are left out unless
// asked for by a prefix of their own: the tests that list keys count the
// keys of requests.
func scanKeys(t testing.TB, c scanner, prefix string) []string {
	t.Helper()
	ctx := context.Background()
	var keys []string
	var cursor uint64
	for {
		ks, next, err := c.Scan(ctx, cursor, prefix+"*", 1000).Result()
		if err != nil {
			t.Fatalf("scan: %v", err)
		}
		for _, k := range ks {
			if strings.Contains(prefix, "{tally}:") || !strings.HasPrefix(k, prefix+"{tally}:") {
				keys = append(keys, k)
			}
		}
		if cursor = next; cursor == 0 {
			return keys
		}
	}
}

// checkTTLs asserts that every key under prefix has a TTL: an engine key
// without one would live forever.
func checkTTLs(t testing.TB, c scanner, prefix string) int {
	t.Helper()
	ctx := context.Background()
	keys := scanKeys(t, c, prefix)
	for _, k := range keys {
		d, err := c.PTTL(ctx, k).Result()
		if err == nil && d == -2 {
			continue // expired since the scan (PTTL's -2: no such key), as it should
		}
		if err != nil || d <= 0 {
			t.Errorf("key %q: PTTL %v, %v; want > 0", k, d, err)
		}
	}
	return len(keys)
}

// afterTTLs registers checkTTLs on the test's end, on a single server.
func afterTTLs(t *testing.T, c *redis.Client, prefix string) {
	t.Cleanup(func() { checkTTLs(t, c, prefix) })
}

// afterClusterTTLs registers checkTTLs on every master at the test's end.
func afterClusterTTLs(t *testing.T, cl *redistest.Cluster, prefix string) {
	t.Cleanup(func() {
		for _, n := range cl.Nodes {
			c := redis.NewClient(&redis.Options{Addr: n.Addr})
			checkTTLs(t, c, prefix)
			c.Close()
		}
	})
}

// newEngine is testutil.NewEngine for this package's own tests, which
// cannot import a package that imports the engine.
func newEngine(t testing.TB, c Client, opts ...Option) *Engine {
	t.Helper()
	// The default 100 ms timeout is for production; under -race on two busy
	// cores a healthy Redis can take longer, and a fail-mode decision would
	// break a test about Redis. Tests about timeouts pass their own.
	opts = append([]Option{WithTimeout(5 * time.Second)}, opts...)
	e, err := New(c, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	return e
}

// miniEngine returns a miniredis the test may stop and restart, a Clock,
// and an engine on both with fail mode mode, a 2 s timeout and opts.
func miniEngine(t *testing.T, mode rules.FailMode, opts ...Option) (*miniredis.Miniredis, *redistest.Clock, *Engine) {
	t.Helper()
	m := miniredis.RunT(t)
	clk := redistest.NewClock()
	rc := redisClient(m.Addr())
	t.Cleanup(func() { rc.Close() })
	opts = append([]Option{WithClock(clk.Now), WithFailMode(mode), WithTimeout(2 * time.Second)}, opts...)
	return m, clk, newEngine(t, rc, opts...)
}

func win(limit int64, period time.Duration) rules.Window {
	return rules.Window{Limit: limit, Period: period}
}

// resetSubject is reset of a subject given as is.
func (e *Engine) resetSubject(ctx context.Context, scope string, l rules.Rule, subject string) error {
	return e.reset(ctx, scope, l, subject, false)
}

// resetHashed is reset of a subject known by its stored hash.
func (e *Engine) resetHashed(ctx context.Context, scope string, l rules.Rule, hash string) error {
	return e.reset(ctx, scope, l, hash, true)
}

// sourceNamed returns the source whose name is Decision.Source's value.
func sourceNamed(name string) source {
	for s := fromRedis; s <= fromCache; s++ {
		if s.String() == name {
			return s
		}
	}
	return fromCache + 1
}
