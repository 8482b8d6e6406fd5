package main

import (
	"context"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"

	"github.com/slidelimit/slidelimit/internal/redistest"
)

// asDemo makes the test binary run as the demo command, so that a tour
// block's "go run ./cmd/demo" needs no build.
const asDemo = "SLIDELIMIT_TOUR_AS_DEMO"

func TestMain(m *testing.M) {
	if os.Getenv(asDemo) == "1" {
		main()
	}
	os.Exit(m.Run())
}

// oldTourPorts are the fixed ports the tour's two-process block used to
// start its Redis and demos on.
var oldTourPorts = []string{"127.0.0.1:16399", "127.0.0.1:18081", "127.0.0.1:18082"}

// TestTourTwoProcesses runs the tour's rule-override block as a whole, as
// the page says to (one shell, job control on), with redis-server and two
// demo processes, while another Redis holds the port the block used to
// take and listeners hold its old demo ports: the block must still show
// the page's outputs, in order, and never talk to that other Redis.
func TestTourTwoProcesses(t *testing.T) {
	t.Parallel()
	for _, tool := range []string{"bash", "curl", "redis-server", "redis-cli"} {
		if _, err := exec.LookPath(tool); err != nil {
			if os.Getenv(redistest.RequireEnv) == "1" {
				t.Fatalf("TestTourTwoProcesses needs %s: %v", tool, err)
			}
			t.Skipf("TestTourTwoProcesses needs %s: %v", tool, err)
		}
	}
	page, err := os.ReadFile(tourPage)
	if err != nil {
		t.Fatal(err)
	}
	block := shBlock(string(page), "redis-server")
	if block == "" {
		t.Fatal("the tour has no sh block starting redis-server")
	}
	// Someone else's Redis on the old Redis port, and the old demo ports
	// taken; a port another program holds already is taken as well.
	other := miniredis.NewMiniRedis()
	if err := other.StartAddr(oldTourPorts[0]); err != nil {
		t.Logf("%s is taken already: %v", oldTourPorts[0], err)
	} else {
		t.Cleanup(other.Close)
	}
	for _, a := range oldTourPorts[1:] {
		if l, err := net.Listen("tcp", a); err == nil {
			t.Cleanup(func() { l.Close() })
		}
	}

	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	wrapper := filepath.Join(dir, "demo")
	script := "#!/bin/sh\n" + asDemo + "=1 exec '" + exe + "' \"$@\"\n"
	if err := os.WriteFile(wrapper, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	// Job control as in an interactive shell; whatever the block leaves
	// running when it fails is stopped on exit.
	run := "set -m\ntrap 'kill $(jobs -p) 2>/dev/null' EXIT\n" + strings.ReplaceAll(block, "go run ./cmd/demo", wrapper)
	var want []string
	for line := range strings.Lines(block) {
		if w, ok := strings.CutPrefix(strings.TrimRight(line, "\n"), "# "); ok {
			want = append(want, w)
		}
	}
	if len(want) < 8 {
		t.Fatalf("found %d outputs in the block: %q", len(want), want)
	}
	// Six requests within one second, and an override seen 0.1 s after
	// it was set, may take longer on a loaded machine: a block whose
	// outputs differ runs again, twice at most.
	var failed string
	for range 3 {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		cmd := exec.CommandContext(ctx, "bash", "-c", run)
		cmd.Dir = dir // redis-server writes nothing, but not into the repository either
		// A job of the block, in its own process group, may outlive a
		// killed bash and hold the output open.
		cmd.WaitDelay = 5 * time.Second
		out, err := cmd.CombinedOutput()
		cancel()
		if err != nil {
			t.Fatalf("the block failed: %v\n%s", err, out)
		}
		if missing := subsequence(strings.Split(normalize("", string(out)), "\n"), want, ""); missing != "" {
			failed = "output lacks " + strconv.Quote(missing) + " (in the page's order):\n" + string(out)
			t.Log(failed)
			continue
		}
		failed = ""
		break
	}
	if failed != "" {
		t.Error(failed)
	}
	if n := other.CommandCount(); n != 0 {
		t.Errorf("the block sent %d commands to the Redis it did not start", n)
	}
}

// shBlock returns the first sh code block of page that contains s.
func shBlock(page, s string) string {
	for _, part := range strings.Split(page, "```sh\n")[1:] {
		block, _, _ := strings.Cut(part, "```")
		if strings.Contains(block, s) {
			return block
		}
	}
	return ""
}
