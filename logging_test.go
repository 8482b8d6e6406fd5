package slidelimit_test

import (
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/slidelimit/slidelimit"
)

// TestNewWarnsOnStderr checks that the library logs to slog.Default()
// without WithLogger: New with a plain go-redis client (ContextTimeoutEnabled
// false) and no options writes a WARN saying so to the process's stderr.
// The test runs itself in a child process, whose stderr it reads: the
// default logger writes to the stderr the process started with.
func TestNewWarnsOnStderr(t *testing.T) {
	if os.Getenv("SLIDELIMIT_TEST_CHILD") == "new-plain" {
		mr := miniredis.RunT(t)
		c := redis.NewClient(&redis.Options{Addr: mr.Addr()})
		defer c.Close()
		lim, err := slidelimit.New(c)
		if err != nil {
			t.Fatal(err)
		}
		lim.Close()
		return
	}
	t.Parallel()
	cmd := exec.Command(os.Args[0], "-test.run=^TestNewWarnsOnStderr$", "-test.count=1")
	cmd.Env = append(os.Environ(), "SLIDELIMIT_TEST_CHILD=new-plain")
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("child: %v\n%s", err, stderr.String())
	}
	var warn string
	for line := range strings.Lines(stderr.String()) {
		if strings.Contains(line, "ContextTimeoutEnabled") {
			warn = line
		}
	}
	if !strings.Contains(warn, "WARN") {
		t.Errorf("no WARN about ContextTimeoutEnabled on stderr:\n%s", stderr.String())
	}
	// The embedded miniredis cannot evict: no eviction warning for it.
	if strings.Contains(stderr.String(), "INFO memory") || strings.Contains(stderr.String(), "evict") {
		t.Errorf("eviction warning for a server that cannot evict:\n%s", stderr.String())
	}
}
