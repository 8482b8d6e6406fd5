package main

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/logging"
)

// redisLines records what go-redis's own, package-wide logger prints.
type redisLines struct {
	mu    sync.Mutex
	lines []string
}

func (l *redisLines) Printf(_ context.Context, format string, v ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lines = append(l.lines, fmt.Sprintf(format, v...))
}

// TestDemoStartsQuiet starts the demo as `go run ./cmd/demo` does, on the
// embedded miniredis, and serves a request: go-redis must print nothing
// (its first line was "failed to initialize maintnotifications ... cannot
// overwrite existing handler", from the engine's probe of the store).
// Not parallel: go-redis's logger is global; the default is restored.
func TestDemoStartsQuiet(t *testing.T) {
	lines := &redisLines{}
	redis.SetLogger(lines)
	t.Cleanup(logging.Enable)
	td := newTestDemo(t, "")
	if c := td.do("GET", "/health", "", peer).Code; c != http.StatusOK {
		t.Errorf("GET /health: %d", c)
	}
	lines.mu.Lock()
	defer lines.mu.Unlock()
	if len(lines.lines) > 0 {
		t.Errorf("go-redis printed %d lines:\n%s", len(lines.lines), strings.Join(lines.lines, "\n"))
	}
}
