package tally

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/slidelimit/slidelimit/engine"
	"github.com/slidelimit/slidelimit/internal/testutil"
	"github.com/slidelimit/slidelimit/rules"
)

// testEngine is what newEngine keeps of an engine: its client, and the
// tallies its denial hook feeds once withTallies sets them.
type testEngine struct {
	client engine.Client
	feeds  atomic.Pointer[Tallies]
}

// engines maps each engine newEngine made to its testEngine.
var engines sync.Map

// newEngine returns testutil.NewEngine's engine on c, whose denial hook
// feeds the tallies withTallies gives it.
func newEngine(t testing.TB, c engine.Client, opts ...engine.Option) *engine.Engine {
	t.Helper()
	te := &testEngine{client: c}
	hook := engine.WithDenialHook(func(d engine.Denial) {
		if tl := te.feeds.Load(); tl != nil {
			tl.Note(d)
		}
	})
	e := testutil.NewEngine(t, c, append([]engine.Option{hook}, opts...)...)
	engines.Store(e, te)
	t.Cleanup(func() { engines.Delete(e) })
	return e
}

// storeOf returns the Store of e's tallies, as the root package builds
// it, with the test engines' write deadline.
func storeOf(e *engine.Engine) Store {
	te, _ := engines.Load(e)
	return Store{Client: te.(*testEngine).client, Prefix: e.KeyPrefix(), Timeout: 5 * time.Second, Log: e.Logger(), Down: e.Down}
}

// withTallies returns e's tallies, fed by its denial hook and written
// every flush (not written when flush is 0), as the root package wires
// them; they are closed at the test's end, before the engine.
func withTallies(t testing.TB, e *engine.Engine, flush time.Duration) *Tallies {
	tl := New(storeOf(e))
	te, _ := engines.Load(e)
	te.(*testEngine).feeds.Store(tl)
	if flush > 0 {
		tl.Start(flush)
	}
	t.Cleanup(tl.Close)
	return tl
}

func win(limit int64, period time.Duration) rules.Window {
	return rules.Window{Limit: limit, Period: period}
}

// denial is a denial of subject, stored as is, by a user rule.
func denial(scope, subject string) engine.Denial {
	return engine.Denial{Scope: scope, Kind: rules.User, Subject: subject}
}

// storedHash is the engine's stored hash of subject without a secret.
func storedHash(subject string) string {
	sum := sha256.Sum256([]byte(subject))
	return "#" + base64.RawURLEncoding.EncodeToString(sum[:])
}

// scanKeys lists the keys under prefix.
func scanKeys(t testing.TB, c *redis.Client, prefix string) []string {
	t.Helper()
	var keys []string
	var cursor uint64
	for {
		ks, next, err := c.Scan(context.Background(), cursor, prefix+"*", 1000).Result()
		if err != nil {
			t.Fatalf("scan: %v", err)
		}
		keys = append(keys, ks...)
		if cursor = next; cursor == 0 {
			return keys
		}
	}
}

// recordHandler is a slog.Handler recording the messages logged.
type recordHandler struct {
	mu   sync.Mutex
	msgs []string
}

func (h *recordHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h *recordHandler) WithAttrs([]slog.Attr) slog.Handler       { return h }
func (h *recordHandler) WithGroup(string) slog.Handler            { return h }

func (h *recordHandler) Handle(_ context.Context, r slog.Record) error {
	h.mu.Lock()
	h.msgs = append(h.msgs, r.Message)
	h.mu.Unlock()
	return nil
}

// matching returns the messages logged that contain s.
func (h *recordHandler) matching(s string) []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []string
	for _, m := range h.msgs {
		if strings.Contains(m, s) {
			out = append(out, m)
		}
	}
	return out
}
