package slidelimit_test

// Login protection with count: (seed scenario): only failed logins count,
// checked end to end through Handle on real Redis, miniredis and a Redis
// Cluster.

import (
	"context"
	"crypto/rand"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/slidelimit/slidelimit"
	"github.com/slidelimit/slidelimit/engine"
	"github.com/slidelimit/slidelimit/internal/redistest"
	"github.com/slidelimit/slidelimit/role"
)

const loginRules = "key(account):5/d; ip:50/h; count:401"

// loginBackend is a Redis deployment the login tests run on, with a way to
// list what its keys hold.
type loginBackend struct {
	name   string
	client func(t *testing.T) (engine.Client, redis.UniversalClient)
}

func loginBackends() []loginBackend {
	return []loginBackend{
		{"redis", func(t *testing.T) (engine.Client, redis.UniversalClient) {
			c := redistest.Start(t).Client()
			return c, c
		}},
		{"miniredis", func(t *testing.T) (engine.Client, redis.UniversalClient) {
			_, c := redistest.Mini(t)
			return c, c
		}},
		{"cluster", func(t *testing.T) (engine.Client, redis.UniversalClient) {
			c := redistest.StartCluster(t).Client(t)
			return c, c
		}},
	}
}

// loginServer is a login endpoint limited by loginRules: password
// "secret" for every account answers 200, anything else 401.
type loginServer struct {
	mux     *http.ServeMux
	reached atomic.Int64 // requests that reached the handler
	prefix  string
}

func newLoginServer(t *testing.T, client engine.Client) *loginServer {
	t.Helper()
	s := &loginServer{mux: http.NewServeMux(), prefix: "login" + rand.Text()[:8] + ":"}
	lim, err := slidelimit.New(client,
		slidelimit.WithEngineOptions(engine.WithKeyPrefix(s.prefix), engine.WithTimeout(5*time.Second), engine.WithFailMode("closed")),
		slidelimit.WithKeyFunc("account", func(r *http.Request) string { return r.PostFormValue("account") }),
	)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lim.Close() })
	err = lim.Handle(s.mux, "POST /login", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.reached.Add(1)
		if r.PostFormValue("password") != "secret" {
			http.Error(w, "wrong password", http.StatusUnauthorized)
			return
		}
		w.Write([]byte("welcome"))
	}), loginRules)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func (s *loginServer) login(account, password, remote string, id *role.Identity) int {
	form := url.Values{"account": {account}, "password": {password}}
	r := httptest.NewRequest("POST", "/login", strings.NewReader(form.Encode()))
	r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	r.RemoteAddr = remote
	if id != nil {
		r = r.WithContext(role.NewContext(r.Context(), *id))
	}
	w := httptest.NewRecorder()
	s.mux.ServeHTTP(w, r)
	return w.Code
}

// entries returns the number of requests stored under the server's prefix,
// over every key (markers have negative scores and are not requests).
func (s *loginServer) entries(t *testing.T, rc redis.UniversalClient) int64 {
	t.Helper()
	ctx := context.Background()
	var mu sync.Mutex
	var n int64
	count := func(ctx context.Context, c *redis.Client) error {
		it := c.Scan(ctx, 0, s.prefix+"*", 100).Iterator()
		for it.Next(ctx) {
			k, err := c.ZCount(ctx, it.Val(), "0", "+inf").Result()
			if err != nil {
				return err
			}
			mu.Lock()
			n += k
			mu.Unlock()
		}
		return it.Err()
	}
	var err error
	switch c := rc.(type) {
	case *redis.ClusterClient:
		err = c.ForEachMaster(ctx, count)
	case *redis.Client:
		err = count(ctx, c)
	}
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// entriesSettled polls entries until it is want, for at most two seconds
// (a loaded machine), and returns the last count: a give-back queued after
// a response reaches Redis shortly after it.
func (s *loginServer) entriesSettled(t *testing.T, rc redis.UniversalClient, want int64) int64 {
	t.Helper()
	deadline := time.Now().Add(2 * time.Second)
	for {
		n := s.entries(t, rc)
		if n == want || time.Now().After(deadline) {
			return n
		}
		time.Sleep(time.Millisecond)
	}
}

func TestLoginCountsOnlyFailures(t *testing.T) {
	t.Parallel()
	for _, b := range loginBackends() {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			client, rc := b.client(t)

			t.Run("successful logins all pass and leave nothing", func(t *testing.T) {
				s := newLoginServer(t, client)
				for i := range 8 {
					if code := s.login("alice", "secret", "192.0.2.1:1000", nil); code != http.StatusOK {
						t.Fatalf("login %d: status %d, want 200", i+1, code)
					}
				}
				if n := s.reached.Load(); n != 8 {
					t.Errorf("%d logins reached the handler, want 8", n)
				}
				// The last login is given back after its response
				// (engine.Engine.FinishAsync): within 1 ms
				// and a round trip for a reader of Redis.
				if n := s.entriesSettled(t, rc, 0); n != 0 {
					t.Errorf("%d entries stored after successful logins only, want 0", n)
				}
			})

			t.Run("wrong passwords reach the handler five times a day", func(t *testing.T) {
				s := newLoginServer(t, client)
				var got []int
				for range 8 {
					got = append(got, s.login("bob", "guess", "192.0.2.2:1000", nil))
				}
				want := []int{401, 401, 401, 401, 401, 429, 429, 429}
				if !slices.Equal(got, want) {
					t.Errorf("statuses %v, want %v", got, want)
				}
				if n := s.reached.Load(); n != 5 {
					t.Errorf("%d wrong passwords reached the handler, want 5", n)
				}
				// The right password is now denied too: the account is locked
				// for the day, which is what the rule asks.
				if code := s.login("bob", "secret", "192.0.2.2:1000", nil); code != http.StatusTooManyRequests {
					t.Errorf("right password after five failures: status %d, want 429", code)
				}
				// key(account) and ip each hold the 5 failures.
				if n := s.entries(t, rc); n != 10 {
					t.Errorf("%d entries stored, want 10 (5 failures in 2 keys)", n)
				}
			})

			t.Run("concurrent wrong passwords let exactly five through", func(t *testing.T) {
				s := newLoginServer(t, client)
				var wg sync.WaitGroup
				var unauthorized, limited atomic.Int64
				for i := range 32 {
					wg.Add(1)
					go func() {
						defer wg.Done()
						switch s.login("carol", "guess", "192.0.2.3:"+strconv.Itoa(1000+i), nil) {
						case http.StatusUnauthorized:
							unauthorized.Add(1)
						case http.StatusTooManyRequests:
							limited.Add(1)
						}
					}()
				}
				wg.Wait()
				if u, l := unauthorized.Load(), limited.Load(); u != 5 || l != 27 {
					t.Errorf("401s %d, 429s %d, want 5 and 27", u, l)
				}
				if n := s.reached.Load(); n != 5 {
					t.Errorf("%d concurrent wrong passwords reached the handler, want 5", n)
				}
			})

			t.Run("mixed: successes in between do not use the budget", func(t *testing.T) {
				s := newLoginServer(t, client)
				var fails int
				for i := range 20 {
					pw := "secret"
					if i%2 == 1 {
						pw = "guess"
					}
					code := s.login("dave", pw, "192.0.2.4:1000", nil)
					if code == http.StatusUnauthorized {
						fails++
					}
					if i < 10 && code == http.StatusTooManyRequests {
						t.Fatalf("login %d denied after %d failures", i+1, fails)
					}
				}
				if fails != 5 {
					t.Errorf("%d failures reached the handler, want 5", fails)
				}
			})
		})
	}
}
