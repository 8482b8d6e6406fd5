package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
)

// redisServer is a redis-server process started by this program on a free
// loopback port, in a temporary directory, without persistence. The
// benchmark only ever talks to a server it started itself: after the start
// it checks that the process answering on the port has the pid of its own
// child.
type redisServer struct {
	Addr    string // 127.0.0.1:port
	Version string // redis_version from INFO server

	dir  string
	cmd  *exec.Cmd
	done chan struct{} // closed when the process has exited

	stopOnce sync.Once
}

// startRedis starts bin on a free loopback port and waits until it answers
// PING. The server is stopped by Stop; it is also killed by the kernel if
// this process dies (Pdeathsig).
func startRedis(bin string) (*redisServer, error) {
	path, err := exec.LookPath(bin)
	if err != nil {
		return nil, fmt.Errorf("redis-server not found (use -redis-server): %w", err)
	}
	dir, err := os.MkdirTemp("", "slidelimit-bench-")
	if err != nil {
		return nil, err
	}
	var lastErr error
	for range 5 {
		port, err := freePort()
		if err != nil {
			os.RemoveAll(dir)
			return nil, err
		}
		s, err := launch(path, dir, port)
		if err == nil {
			return s, nil
		}
		lastErr = err
	}
	os.RemoveAll(dir)
	return nil, lastErr
}

// freePort returns a loopback TCP port that is free right now.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func launch(path, dir string, port int) (*redisServer, error) {
	addr := "127.0.0.1:" + strconv.Itoa(port)
	cmd := exec.Command(path,
		"--port", strconv.Itoa(port), "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no", "--dir", dir,
		"--protected-mode", "yes", "--loglevel", "warning",
		"--logfile", "redis.log", "--daemonize", "no",
	)
	cmd.Dir = dir
	// Own process group: a Ctrl-C in the terminal reaches only this
	// program, which then stops the server itself after printing what it
	// has. Pdeathsig kills the server should this program die abruptly.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start redis-server: %w", err)
	}
	s := &redisServer{Addr: addr, dir: dir, cmd: cmd, done: make(chan struct{})}
	go func() { cmd.Wait(); close(s.done) }()

	c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, DialTimeout: 200 * time.Millisecond})
	defer c.Close()
	deadline := time.Now().Add(10 * time.Second)
	for {
		select {
		case <-s.done:
			return nil, fmt.Errorf("redis-server on port %d exited at start; see %s/redis.log", port, dir)
		default:
		}
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		info, err := c.Info(ctx, "server").Result()
		cancel()
		if err == nil {
			pid := infoField(info, "process_id")
			if pid != strconv.Itoa(cmd.Process.Pid) {
				// Someone else's server took the port between
				// freePort and the start: never use it.
				s.kill()
				return nil, fmt.Errorf("port %d answered by pid %s, not by our redis-server (pid %d)", port, pid, cmd.Process.Pid)
			}
			s.Version = infoField(info, "redis_version")
			return s, nil
		}
		if time.Now().After(deadline) {
			s.kill()
			return nil, fmt.Errorf("redis-server on %s did not answer: %w", addr, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Stop stops the server (SIGTERM, then SIGKILL after 5 s) and removes its
// directory. It is safe to call more than once and from any goroutine.
func (s *redisServer) Stop() {
	s.stopOnce.Do(func() {
		s.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-s.done:
		case <-time.After(5 * time.Second):
			s.kill()
		}
		os.RemoveAll(s.dir)
	})
}

func (s *redisServer) kill() {
	s.cmd.Process.Kill()
	select {
	case <-s.done:
	case <-time.After(5 * time.Second):
	}
}

// infoField returns the value of field in the text of an INFO reply.
func infoField(info, field string) string {
	sc := bufio.NewScanner(strings.NewReader(info))
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), field+":"); ok {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

// keyMemory returns the number of keys on the server and the sum of their
// MEMORY USAGE (SAMPLES 0, which is exact for every element of a sorted
// set).
func keyMemory(ctx context.Context, rdb *redis.Client) (keys, bytes int64, err error) {
	var cursor uint64
	for {
		batch, next, err := rdb.Scan(ctx, cursor, "*", 1000).Result()
		if err != nil {
			return 0, 0, err
		}
		if len(batch) > 0 {
			pipe := rdb.Pipeline()
			cmds := make([]*redis.IntCmd, len(batch))
			for i, k := range batch {
				cmds[i] = pipe.MemoryUsage(ctx, k, 0)
			}
			if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
				return 0, 0, err
			}
			for _, c := range cmds {
				if n, err := c.Result(); err == nil {
					bytes += n
					keys++
				}
			}
		}
		cursor = next
		if cursor == 0 {
			return keys, bytes, nil
		}
	}
}
