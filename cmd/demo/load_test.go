package main

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

func TestRunLoadCountsEveryAnswer(t *testing.T) {
	t.Parallel()
	var n atomic.Int64
	var auth atomic.Value
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		auth.Store(r.Header.Get("Authorization"))
		switch k := n.Add(1); {
		case k <= 5:
			w.WriteHeader(http.StatusOK)
		case k == 6:
			w.WriteHeader(http.StatusInternalServerError)
		default:
			w.Header().Set("Retry-After", "7")
			w.WriteHeader(http.StatusTooManyRequests)
		}
	}))
	t.Cleanup(srv.Close)

	c := loadConfig{url: srv.URL, path: "/health", method: http.MethodGet, token: "alice",
		rps: 40, duration: 1500 * time.Millisecond, concurrency: 2}
	var out bytes.Buffer
	if err := runLoad(context.Background(), c, srv.Client(), &out); err != nil {
		t.Fatal(err)
	}
	sent := n.Load()
	if sent < 7 {
		t.Fatalf("only %d requests reached the server:\n%s", sent, &out)
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	summary := lines[len(lines)-1]
	// A request the server got but whose answer the run's end cut off is
	// not an answer: at most one per worker, and only the last ones (429s).
	var answered int64
	if _, err := fmt.Sscanf(summary, "summary: sent %d,", &answered); err != nil || answered > sent || answered < sent-int64(c.concurrency) {
		t.Fatalf("summary %q counts %d answers of %d requests the server got (at most %d cut off)", summary, answered, sent, c.concurrency)
	}
	want := "summary: sent " + itoa(answered) + ", 200: 5, 429: " + itoa(answered-6) + ", other: 1, retry-after 7s..7s"
	if summary != want {
		t.Errorf("summary = %q\nwant      %q\noutput:\n%s", summary, want, &out)
	}
	if got := auth.Load(); got != "Bearer alice" {
		t.Errorf("Authorization = %q, want %q", got, "Bearer alice")
	}
	if !strings.Contains(out.String(), "   1 ") {
		t.Errorf("no per-second row in:\n%s", &out)
	}
}

func TestParseLoadFlags(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		args []string
		err  string
	}{
		{[]string{"-rps", "0"}, "load: -rps must be at least 1"},
		{[]string{"-concurrency", "0"}, "load: -concurrency must be at least 1"},
		{[]string{"-duration", "0s"}, "load: -duration must be positive"},
		{[]string{"-path", "/files/1", "-token", "alice", "-rps", "3"}, ""},
	} {
		_, err := parseLoadFlags(tt.args, &bytes.Buffer{})
		got := ""
		if err != nil {
			got = err.Error()
		}
		if got != tt.err {
			t.Errorf("parseLoadFlags(%q) error = %q, want %q", tt.args, got, tt.err)
		}
	}
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }
