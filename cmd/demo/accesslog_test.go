package main

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/slidelimit/slidelimit/internal/replay"
)

// TestLoadWritesCombinedLog: load -log writes one Combined Log Format line
// per answer, which slidelimit replay reads back with the user, status
// and size.
func TestLoadWritesCombinedLog(t *testing.T) {
	t.Parallel()
	var n atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if n.Add(1) <= 3 {
			w.Write([]byte("hello"))
			return
		}
		w.WriteHeader(http.StatusTooManyRequests)
	}))
	t.Cleanup(srv.Close)
	logf := filepath.Join(t.TempDir(), "access.log")
	c := loadConfig{url: srv.URL, path: "/files/1", method: http.MethodGet, token: "alice",
		rps: 20, duration: 500 * time.Millisecond, concurrency: 1, log: logf}
	if err := runLoad(context.Background(), c, srv.Client(), &bytes.Buffer{}); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(logf)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(data)), "\n")
	if len(lines) < 4 || !strings.Contains(lines[0], ` - alice [`) || !strings.Contains(lines[0], `"GET /files/1 HTTP/1.1" 200 5 "-" "demo-load"`) {
		t.Fatalf("log:\n%s", data)
	}
	var statuses []int
	rep, err := replay.Run(context.Background(), replay.Config{
		Routes: []replay.RouteRules{{Text: "user:1000/s"}}, Inputs: []replay.Input{{Name: logf}},
		OnDecision: func(r replay.Record, _ bool) { statuses = append(statuses, r.Status) }})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Bad != 0 || rep.Requests != int64(len(lines)) || rep.Subjects[0].Subject != "user:alice" || statuses[0] != 200 || statuses[len(statuses)-1] != 429 {
		t.Errorf("replayed %d of %d lines (bad %d), subjects %v, statuses %v", rep.Requests, len(lines), rep.Bad, rep.Subjects, statuses)
	}
}
