// Package redistest starts real redis-server processes for tests: a single
// server, a 3-master Redis Cluster, or a 3-master + 3-replica cluster whose
// masters can be killed to test a failover, each on free loopback ports, in
// a temporary directory, stopped (SIGKILL, and reaped) when the test ends. It
// never connects to a server it did not start: a server is up once the
// process it started answers (its process_id), and one whose port was
// taken before it could bind it starts again on another.
//
// It also holds what tests of Redis share: a random key prefix, a
// miniredis with its client, and a Clock the test sets.
//
// When redis-server is not installed the tests that need it are skipped,
// unless SLIDELIMIT_REQUIRE_REDIS=1, in which case they fail: CI sets it so
// that a skip can never pass for a success.
package redistest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// RequireEnv is the environment variable that turns a missing redis-server
// into a test failure instead of a skip.
const RequireEnv = "SLIDELIMIT_REQUIRE_REDIS"

// Server is a redis-server process started by a test.
type Server struct {
	Addr string // host:port on 127.0.0.1

	tb      testing.TB
	dir     string
	args    []string
	cluster bool
	extra   []string
	log     string // the log file of the last start

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{} // closed once cmd has been reaped
}

func binaries(tb testing.TB, names ...string) {
	tb.Helper()
	for _, n := range names {
		if _, err := exec.LookPath(n); err != nil {
			if os.Getenv(RequireEnv) == "1" {
				tb.Fatalf("redistest: %s not found and %s=1: %v", n, RequireEnv, err)
			}
			tb.Skipf("redistest: %s not found (set %s=1 to make this a failure)", n, RequireEnv)
		}
	}
}

// freePort returns a loopback TCP port that is free now; for cluster nodes
// the bus port (port+10000) must be free as well.
func freePort(cluster bool) (int, error) {
	for range 100 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return 0, fmt.Errorf("redistest: listen: %v", err)
		}
		port := l.Addr().(*net.TCPAddr).Port
		l.Close()
		if !cluster {
			return port, nil
		}
		if port > 55000 {
			continue
		}
		bus, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(port+10000))
		if err != nil {
			continue
		}
		bus.Close()
		return port, nil
	}
	return 0, errors.New("redistest: no free port")
}

// Start starts a single redis-server and stops it when the test ends.
func Start(tb testing.TB) *Server {
	tb.Helper()
	binaries(tb, "redis-server")
	s := newServer(tb, false)
	if err := s.first(); err != nil {
		tb.Fatalf("%v", err)
	}
	return s
}

// StartWith starts a single redis-server with extra command-line
// arguments, which override the defaults (for example "--appendonly",
// "yes" or "--maxmemory", "3mb"), and stops it when the test ends. Restart
// starts it again with the same arguments and data directory.
func StartWith(tb testing.TB, extra ...string) *Server {
	tb.Helper()
	binaries(tb, "redis-server")
	s := newServer(tb, false, extra...)
	if err := s.first(); err != nil {
		tb.Fatalf("%v", err)
	}
	return s
}

func newServer(tb testing.TB, cluster bool, extra ...string) *Server {
	tb.Helper()
	s := &Server{tb: tb, cluster: cluster, extra: extra}
	if err := s.pick(tb.TempDir()); err != nil {
		tb.Fatalf("%v", err)
	}
	tb.Cleanup(s.Kill)
	return s
}

// pick gives s a free port, and dir as its directory. It does not call
// the testing.TB, so it may run on any goroutine.
func (s *Server) pick(dir string) error {
	port, err := freePort(s.cluster)
	if err != nil {
		return err
	}
	s.dir = dir
	s.args = []string{
		"--port", strconv.Itoa(port), "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no", "--dir", s.dir,
		"--protected-mode", "no", "--loglevel", "warning",
	}
	if s.cluster {
		s.args = append(s.args, "--cluster-enabled", "yes",
			"--cluster-config-file", filepath.Join(s.dir, "nodes.conf"),
			"--cluster-node-timeout", "1000")
	}
	s.args = append(s.args, s.extra...)
	s.Addr = "127.0.0.1:" + strconv.Itoa(port)
	return nil
}

// first starts s for the first time. A port found free can be taken by
// another process (a parallel test's server, a client's ephemeral port,
// a cluster bus port) before redis-server binds it: then s starts again
// on another port, in a new directory inside the first, up to four times.
// It does not call the testing.TB, so it may run on any goroutine.
func (s *Server) first() error {
	for range 4 {
		err := s.startErr()
		if err == nil || !s.portTaken() {
			return err
		}
		dir, err := os.MkdirTemp(s.dir, "again")
		if err != nil {
			return fmt.Errorf("redistest: %v", err)
		}
		if err := s.pick(dir); err != nil {
			return err
		}
	}
	return s.startErr()
}

// answers reports an error unless the server c reaches is process pid.
func (s *Server) answers(ctx context.Context, c *redis.Client, pid int) error {
	info, err := c.Info(ctx, "server").Result()
	if err != nil {
		return err
	}
	want := "process_id:" + strconv.Itoa(pid) + "\r\n"
	if !strings.Contains(info, want) {
		return fmt.Errorf("another redis-server answers on %s", s.Addr)
	}
	return nil
}

// portTaken reports whether the last start failed to bind its port.
func (s *Server) portTaken() bool {
	b, err := os.ReadFile(s.log)
	return err == nil && (bytes.Contains(b, []byte("Address already in use")) || bytes.Contains(b, []byte("Failed listening on port")))
}

func (s *Server) start() {
	s.tb.Helper()
	if err := s.startErr(); err != nil {
		s.tb.Fatalf("%v", err)
	}
}

// startErr starts the process and waits until it answers PING. It does not
// call the testing.TB, so it may run on any goroutine.
func (s *Server) startErr() error {
	s.mu.Lock()
	cmd := exec.Command("redis-server", s.args...)
	cmd.Dir = s.dir
	s.log = filepath.Join(s.dir, fmt.Sprintf("redis-%d.log", time.Now().UnixNano()))
	log, err := os.Create(s.log)
	if err != nil {
		s.mu.Unlock()
		return fmt.Errorf("redistest: %v", err)
	}
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		s.mu.Unlock()
		log.Close()
		return fmt.Errorf("redistest: start redis-server: %v", err)
	}
	done := make(chan struct{})
	s.cmd, s.done = cmd, done
	s.mu.Unlock()
	go func() { cmd.Wait(); log.Close(); close(done) }()

	c := redis.NewClient(&redis.Options{Addr: s.Addr, MaxRetries: -1, ContextTimeoutEnabled: true,
		DialTimeout: 200 * time.Millisecond})
	defer c.Close()
	deadline := time.Now().Add(10 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		err := c.Ping(ctx).Err()
		if err == nil {
			// The server that answers may be another test's, on a port
			// taken after it was found free: it must be this process.
			err = s.answers(ctx, c, cmd.Process.Pid)
		}
		cancel()
		if err == nil {
			return nil
		}
		select {
		case <-done:
			return fmt.Errorf("redistest: redis-server on %s exited: %v (log in %s)", s.Addr, err, s.dir)
		default:
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("redistest: redis-server on %s did not answer: %v", s.Addr, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Kill stops the server at once (SIGKILL). It is safe to call more than once.
func (s *Server) Kill() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd != nil && s.cmd.Process != nil {
		s.cmd.Process.Kill()
		<-s.done // reaped: no zombie is left behind
		// Wait for the port to be released before a Restart reuses it.
		for range 100 {
			if c, err := net.DialTimeout("tcp", s.Addr, 50*time.Millisecond); err == nil {
				c.Close()
				time.Sleep(10 * time.Millisecond)
				continue
			}
			break
		}
	}
	s.cmd = nil
}

// Alive reports whether the server's process was started and not killed.
func (s *Server) Alive() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cmd != nil
}

// Pid returns the process id of the running server, or 0 after Kill.
func (s *Server) Pid() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil || s.cmd.Process == nil {
		return 0
	}
	return s.cmd.Process.Pid
}

// Stop stops the server gracefully, as SHUTDOWN does (SIGTERM): it fsyncs
// an append-only file and exits. It waits for the process to exit and the
// port to be free. It is safe to call more than once and after Kill.
func (s *Server) Stop() {
	s.mu.Lock()
	cmd, done := s.cmd, s.done
	s.mu.Unlock()
	if cmd == nil || cmd.Process == nil {
		return
	}
	cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-done:
	case <-time.After(10 * time.Second):
	}
	s.Kill() // reaps, or kills a server that did not exit
}

// Restart starts the server again on the same port after Kill or Stop,
// with the same arguments and data directory: its data is gone unless
// persistence is on (see StartWith).
func (s *Server) Restart() {
	s.tb.Helper()
	s.Kill()
	s.start()
}

// Client returns a client for the server, closed when the test ends.
func (s *Server) Client() *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: s.Addr})
	s.tb.Cleanup(func() { c.Close() })
	return c
}

// UsedMemory returns the used_memory field of c's INFO memory, in bytes.
func UsedMemory(t testing.TB, c *redis.Client) int64 {
	t.Helper()
	info := c.Info(context.Background(), "memory").Val()
	for _, line := range strings.Split(info, "\r\n") {
		if v, ok := strings.CutPrefix(line, "used_memory:"); ok {
			n, _ := strconv.ParseInt(v, 10, 64)
			return n
		}
	}
	t.Fatal("redistest: no used_memory in INFO memory")
	return 0
}
