package middleware_test

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/slidelimit/slidelimit/engine"
	"github.com/slidelimit/slidelimit/internal/redistest"
	"github.com/slidelimit/slidelimit/internal/testutil"
	"github.com/slidelimit/slidelimit/middleware"
	"github.com/slidelimit/slidelimit/rules"
)

// inflightServer serves h behind middleware for group text on a real HTTP
// server, deciding with an engine on a real redis-server (the slot keys'
// commands are proven on Redis, not on a fake).
func inflightServer(t *testing.T, text string, h http.HandlerFunc) *httptest.Server {
	t.Helper()
	e := testutil.NewEngine(t, redistest.Start(t).Client())
	mw, err := middleware.New(rules.MustParse(text), e, middleware.WithScope("s"))
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(mw(h))
	t.Cleanup(srv.Close)
	return srv
}

// admittedSoon polls srv until a request is admitted (the previous one's
// slot released), failing after a few seconds.
func admittedSoon(t *testing.T, url string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		code, _ := get(t, url, false)
		if code == http.StatusOK {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("slot not released: status %d", code)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestInflightFields: while one request runs, a second one is refused 429
// naming the in-flight policy, with Retry-After 1 and the
// concurrent-requests quota unit; once the first ends, a third is admitted
// and told its free slots.
func TestInflightFields(t *testing.T) {
	t.Parallel()
	entered, finish := make(chan struct{}), make(chan struct{})
	var first atomic.Bool
	srv := inflightServer(t, "ip:10/min,1 concurrent", func(w http.ResponseWriter, r *http.Request) {
		if first.CompareAndSwap(false, true) {
			close(entered)
			<-finish
		}
		w.Write([]byte("ok"))
	})
	done := make(chan int)
	go func() {
		res, err := http.Get(srv.URL)
		if err != nil {
			t.Error(err)
			done <- 0
			return
		}
		res.Body.Close()
		done <- res.StatusCode
	}()
	<-entered
	res, err := http.Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	const policy = `"ip-1min";q=10;w=60, "ip-concurrent";q=1;qu="concurrent-requests"`
	if res.StatusCode != 429 || res.Header.Get("Retry-After") != "1" || res.Header.Get("RateLimit-Policy") != policy ||
		res.Header.Get("RateLimit") != `"ip-concurrent";r=0` {
		t.Errorf("second request: %d, headers %v", res.StatusCode, res.Header)
	}
	var p struct {
		Type     string   `json:"type"`
		Detail   string   `json:"detail"`
		Violated []string `json:"violated-policies"`
	}
	if err := json.Unmarshal(body, &p); err != nil || len(p.Violated) != 1 || p.Violated[0] != "ip-concurrent" ||
		!strings.Contains(p.Detail, "(1 request at a time) exceeded; retry after 1s.") {
		t.Errorf("problem body %s (%v)", body, err)
	}
	close(finish)
	if code := <-done; code != 200 {
		t.Fatalf("first request: %d", code)
	}
	res, err = http.Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if got := res.Header.Values("RateLimit"); res.StatusCode != 200 || len(got) != 2 || got[1] != `"ip-concurrent";r=0` {
		t.Errorf("third request: %d, RateLimit %q", res.StatusCode, got)
	}
}

// TestInflightReleaseEndings: the slot is released however the handler
// ends: a panic, a hijacked connection, a client that hung up.
func TestInflightReleaseEndings(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		handler func(w http.ResponseWriter, r *http.Request)
		client  func(t *testing.T, url string)
	}{
		{"panic", func(w http.ResponseWriter, r *http.Request) {
			panic(http.ErrAbortHandler)
		}, func(t *testing.T, url string) {
			if res, err := http.Get(url); err == nil {
				res.Body.Close()
				t.Fatalf("aborted handler answered %d", res.StatusCode)
			}
		}},
		{"hijack", func(w http.ResponseWriter, r *http.Request) {
			conn, buf, err := http.NewResponseController(w).Hijack()
			if err != nil {
				panic(err)
			}
			buf.WriteString("HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nhi")
			buf.Flush()
			conn.Close()
		}, func(t *testing.T, url string) {
			res, err := http.Get(url)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(bufio.NewReader(res.Body))
			res.Body.Close()
			if string(b) != "hi" {
				t.Fatalf("hijacked answer %q", b)
			}
		}},
		{"hang-up", func(w http.ResponseWriter, r *http.Request) {
			<-r.Context().Done() // works until the client is gone
		}, func(t *testing.T, url string) {
			ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
			defer cancel()
			req, _ := http.NewRequestWithContext(ctx, "GET", url, nil)
			if res, err := http.DefaultClient.Do(req); err == nil {
				res.Body.Close()
				t.Fatalf("hung-up request answered %d", res.StatusCode)
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var calls atomic.Int64
			srv := inflightServer(t, "ip:1 concurrent", func(w http.ResponseWriter, r *http.Request) {
				if calls.Add(1) == 1 {
					tt.handler(w, r)
					return
				}
				w.Write([]byte("ok"))
			})
			tt.client(t, srv.URL)
			admittedSoon(t, srv.URL)
		})
	}
}

func TestInflightNeedsFinisher(t *testing.T) {
	t.Parallel()
	d := &funcDecider{allow: func(engine.Request) (engine.Decision, error) { return engine.Decision{Allowed: true}, nil }}
	_, err := middleware.New(rules.MustParse("ip:1 concurrent"), d)
	if testutil.ConfigError(err, "decider", "") == nil {
		t.Errorf("New with a Decider that cannot release: %v, want ErrNoFinish", err)
	}
	if _, err := middleware.New(rules.MustParse("ip:1/s"), d); err != nil {
		t.Errorf("New without an in-flight window: %v", err)
	}
}
