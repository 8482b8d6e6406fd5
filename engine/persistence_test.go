package engine

import (
	"context"
	"testing"
	"time"

	"github.com/slidelimit/slidelimit/internal/redistest"
)

// TestRestartPersistence fills a subject's window, restarts redis-server on
// the same port and checks what the window kept: nothing without
// persistence, everything with appendonly yes and appendfsync everysec,
// after a crash (SIGKILL) more than a second after the writes and after a
// graceful shutdown (which fsyncs) at once.
func TestRestartPersistence(t *testing.T) {
	t.Parallel()
	aof := []string{"--appendonly", "yes", "--appendfsync", "everysec"}
	for _, tc := range []struct {
		name string
		args []string
		stop func(s *redistest.Server)
		kept bool
	}{
		{"no persistence", nil, (*redistest.Server).Kill, false},
		{"aof everysec, crash after 1.2 s", aof, func(s *redistest.Server) {
			time.Sleep(1200 * ms) // the fsync of the second that held the writes
			s.Kill()
		}, true},
		{"aof everysec, shutdown", aof, (*redistest.Server).Stop, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := redistest.StartWith(t, tc.args...)
			rc := s.Client()
			e := newEngine(t, rc, WithKeyPrefix(redistest.Prefix(t)), WithCachedDenials(false))
			r := req(user("alice", win(10, time.Hour)))
			for range 10 {
				mustAllow(t, e, r, true)
			}
			mustAllow(t, e, r, false)

			tc.stop(s)
			s.Restart()
			var d Decision
			var err error
			deadline := time.Now().Add(10 * time.Second)
			for {
				// Until the engine's probe finds the server back, and
				// while it loads its file, the fail mode decides.
				if d, err = e.peek(context.Background(), r); err == nil && d.Source == "redis" {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("no decision from Redis 10 s after the restart: %v %v", d.Source, err)
				}
				time.Sleep(10 * ms)
			}
			used := d.Windows[0].Used
			t.Logf("after the restart alice's window holds %d of 10", used)
			if tc.kept && (used != 10 || d.Allowed) {
				t.Errorf("window holds %d (allowed %v) after the restart, want 10, full", used, d.Allowed)
			}
			if !tc.kept && (used != 0 || !d.Allowed) {
				t.Errorf("window holds %d after a restart without persistence, want 0", used)
			}
		})
	}
}
