package engine

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/slidelimit/slidelimit/engine/internal/eviction"
	"github.com/slidelimit/slidelimit/internal/redistest"
)

// TestEvictionPolicy checks the warning New logs, and the error of
// WithRequireNoEviction, for servers whose policy can evict the engine's
// keys, and that a server that cannot evict them passes.
func TestEvictionPolicy(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args     []string
		evicting bool
	}{
		{[]string{"--maxmemory", "3mb", "--maxmemory-policy", "allkeys-lru"}, true},
		{[]string{"--maxmemory", "3mb", "--maxmemory-policy", "volatile-lru"}, true}, // every engine key has a TTL
		{[]string{"--maxmemory", "3mb", "--maxmemory-policy", "noeviction"}, false},
		{[]string{"--maxmemory-policy", "allkeys-lru"}, false}, // no maxmemory: nothing is evicted
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			t.Parallel()
			s := redistest.StartWith(t, tc.args...)
			rc := s.Client()
			h := &recordHandler{}
			newEngine(t, rc, WithLogger(slog.New(h)))
			warns := h.matching("may evict")
			switch {
			case tc.evicting && len(warns) != 1:
				t.Errorf("%d eviction warnings, want 1: %+v", len(warns), h.all())
			case tc.evicting:
				w := warns[0]
				policy := tc.args[len(tc.args)-1]
				if w.level != slog.LevelWarn || w.attrs["server"].String() != s.Addr || w.attrs["maxmemory_policy"].String() != policy {
					t.Errorf("warning %+v, want server %s and policy %s", w, s.Addr, policy)
				}
				t.Logf("%s server=%s maxmemory_policy=%s maxmemory=%d", w.msg, w.attrs["server"], w.attrs["maxmemory_policy"], w.attrs["maxmemory"].Int64())
			case len(warns) != 0:
				t.Errorf("eviction warning for a server that cannot evict: %+v", warns)
			}

			e, err := New(rc, WithRequireNoEviction())
			if e != nil {
				e.Close()
			}
			var ee *eviction.Error
			if tc.evicting {
				if !errors.As(err, &ee) || !errors.Is(err, eviction.ErrMayEvict) || ee.Server != s.Addr || ee.Policy != tc.args[len(tc.args)-1] || ee.MaxMemory != 3<<20 {
					t.Errorf("New with WithRequireNoEviction: %v, want an *eviction.Error for %s", err, s.Addr)
				}
			} else if err != nil {
				t.Errorf("New with WithRequireNoEviction: %v", err)
			}
		})
	}
}

// TestRequireNoEvictionUnreadable checks that WithRequireNoEviction fails
// New when it cannot read a server's INFO.
func TestRequireNoEvictionUnreadable(t *testing.T) {
	t.Parallel()
	rc := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1, DialerRetries: 1})
	t.Cleanup(func() { rc.Close() })
	e, err := New(rc, WithRequireNoEviction())
	var be *backendError
	if e != nil || !errors.As(err, &be) || be.Op != "info" {
		t.Errorf("New: %v %v, want a *backendError for info", e, err)
	}
	if _, err := New(rc, WithEvictionHook(nil)); !errors.Is(err, ErrInvalid) {
		t.Errorf("nil eviction hook: %v", err)
	}
}

// TestEvictionGuardLines checks what the guard says at New about servers
// whose memory policy it cannot read: nothing about the embedded
// miniredis, which cannot evict (and which WithRequireNoEviction accepts),
// and, about a server that does not answer, that it is down.
func TestEvictionGuardLines(t *testing.T) {
	t.Parallel()
	t.Run("miniredis", func(t *testing.T) {
		t.Parallel()
		mr := miniredis.RunT(t)
		rc := redis.NewClient(&redis.Options{Addr: mr.Addr(), ContextTimeoutEnabled: true})
		t.Cleanup(func() { rc.Close() })
		h := &recordHandler{}
		e, err := New(rc, WithLogger(slog.New(h)), WithRequireNoEviction())
		if err != nil {
			t.Fatal(err)
		}
		e.Close()
		if all := h.all(); len(all) > 0 {
			t.Errorf("lines about miniredis, which cannot evict: %+v", all)
		}
	})
	t.Run("down", func(t *testing.T) {
		t.Parallel()
		rc := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", ContextTimeoutEnabled: true, MaxRetries: -1, DialerRetries: 1})
		t.Cleanup(func() { rc.Close() })
		h := &recordHandler{}
		e, err := New(rc, WithLogger(slog.New(h)))
		if err != nil {
			t.Fatal(err)
		}
		e.Close()
		if down := h.matching("redis is down"); len(down) != 1 || down[0].level != slog.LevelWarn {
			t.Errorf("lines %+v, want one warning that redis is down", h.all())
		}
		if wrong := h.matching("INFO disabled"); len(wrong) > 0 {
			t.Errorf("a down server's line names another cause: %+v", wrong)
		}
	})
}

// TestEvictionDetected fills a server with maxmemory 3mb and allkeys-lru,
// the shared-cache setup of issue 22: a full subject's window is evicted
// and the subject admitted again, and the engine reports the evictions to
// the hook and the log.
func TestEvictionDetected(t *testing.T) {
	t.Parallel()
	s := redistest.StartWith(t, "--maxmemory", "3mb", "--maxmemory-policy", "allkeys-lru")
	rc := s.Client()
	h := &recordHandler{}
	var mu sync.Mutex
	var events []EvictionEvent
	e := newEngine(t, rc, WithKeyPrefix(redistest.Prefix(t)), WithLogger(slog.New(h)), withEvictionCheck(50*ms),
		WithEvictionHook(func(ev EvictionEvent) { mu.Lock(); events = append(events, ev); mu.Unlock() }))
	r := req(user("alice", win(10, time.Minute)))
	for range 10 {
		mustAllow(t, e, r, true)
	}
	mustAllow(t, e, r, false)

	ctx := context.Background()
	big := strings.Repeat("x", 100<<10)
	for i := range 100 { // 10 MB into 3 MB
		if err := rc.Set(ctx, "cache:"+string(rune('a'+i%26))+strings.Repeat("k", i), big, 0).Err(); err != nil {
			t.Fatal(err)
		}
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		mu.Lock()
		n := len(events)
		mu.Unlock()
		if n > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no EvictionEvent 5 s after filling the server")
		}
		time.Sleep(10 * ms)
	}
	mu.Lock()
	ev := events[0]
	mu.Unlock()
	if ev.Server != s.Addr || ev.Policy != "allkeys-lru" || ev.Evicted <= 0 || ev.Total < ev.Evicted {
		t.Errorf("event %+v", ev)
	}
	logs := h.matching("evicted keys")
	if len(logs) == 0 || logs[0].attrs["server"].String() != s.Addr {
		t.Errorf("eviction lines %+v", logs)
	}
	// What the guard warns about: alice's window may be gone.
	d, _ := e.Allow(ctx, r)
	t.Logf("%d keys evicted; alice (10 of 10 used, her key recently used) admitted after the eviction: %v", ev.Total, d.Allowed)
}

// TestOutOfMemory checks that with noeviction and memory full the script's
// OOM error goes to the fail mode, logged once, and that decisions come
// from Redis again once memory is freed.
func TestOutOfMemory(t *testing.T) {
	t.Parallel()
	s := redistest.Start(t)
	rc := redis.NewClient(&redis.Options{Addr: s.Addr, ContextTimeoutEnabled: true})
	t.Cleanup(func() { rc.Close() })
	ctx := context.Background()
	h := &recordHandler{}
	e := newEngine(t, rc, WithKeyPrefix(redistest.Prefix(t)), WithLogger(slog.New(h)))
	r := req(user("u", win(1000, time.Minute)))
	mustAllow(t, e, r, true)
	if err := rc.ConfigSet(ctx, "maxmemory", "1").Err(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rc.ConfigSet(ctx, "maxmemory", "0") })
	const n = 50
	for i := range n {
		d, err := e.Allow(ctx, r)
		if d.Source != "local" || !errors.Is(err, ErrBackend) || !strings.Contains(err.Error(), "OOM") {
			t.Fatalf("call %d out of memory: source %v err %v", i, d.Source, err)
		}
	}
	if oom := h.matching("out of memory"); len(oom) != 1 || oom[0].level != slog.LevelWarn {
		t.Errorf("out-of-memory lines %+v, want 1", oom)
	} else {
		t.Logf("%s err=%v", oom[0].msg, oom[0].attrs["err"])
	}
	if all := h.all(); len(all) != 1 {
		t.Errorf("%d log lines for %d failures: %+v", len(all), n, all)
	}
	if err := rc.ConfigSet(ctx, "maxmemory", "0").Err(); err != nil {
		t.Fatal(err)
	}
	if d, err := e.Allow(ctx, r); err != nil || d.Source != "redis" {
		t.Errorf("after freeing memory: %v %v", d.Source, err)
	}
}
