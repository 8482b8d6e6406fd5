package main

import (
	"bytes"
	"context"
	"flag"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// TestLoadWritesCombinedLog: load -log writes one Combined Log Format line
// per answer, with the user, status and size.
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
}

var update = flag.Bool("update", false, "rewrite testdata/access.log")

// TestAccessLogFixture: accessLog writes testdata/access.log, byte for
// byte, which the replay package's tests read back (TestReplayDemoLog).
func TestAccessLogFixture(t *testing.T) {
	t.Parallel()
	var b bytes.Buffer
	l := &accessLog{w: &b}
	start := time.Date(2026, 3, 1, 12, 0, 0, 0, time.FixedZone("", 3600))
	for i := range 4 {
		status, size := http.StatusOK, int64(5)
		if i == 3 {
			status, size = http.StatusTooManyRequests, 0
		}
		l.write(start.Add(time.Duration(i)*100*time.Millisecond), "alice", http.MethodGet, "/files/1", status, size)
	}
	l.write(start.Add(time.Second), "", http.MethodPost, "/login", http.StatusOK, 2)
	const file = "testdata/access.log"
	if *update {
		if err := os.WriteFile(file, b.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(b.Bytes(), want) {
		t.Errorf("accessLog wrote\n%s\n%s holds\n%s", b.Bytes(), file, want)
	}
}
