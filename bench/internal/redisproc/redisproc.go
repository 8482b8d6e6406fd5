// Package redisproc starts the redis-server processes the bench's
// multi-process programs (fleet, regions) run against.
package redisproc

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
)

// A Server is a redis-server this program started.
type Server struct {
	Addr string // its loopback address, host:port
	dir  string
	cmd  *exec.Cmd
	done chan struct{}
}

// Start starts bin on a free loopback port, without persistence, and
// waits until it answers as the process it started (by pid); the kernel
// kills it should this program die (Pdeathsig).
func Start(bin, name string) (*Server, error) {
	path, err := exec.LookPath(bin)
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "slidelimit-"+name+"-")
	if err != nil {
		return nil, err
	}
	for range 5 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		port := l.Addr().(*net.TCPAddr).Port
		l.Close()
		cmd := exec.Command(path, "--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--save", "",
			"--appendonly", "no", "--dir", dir, "--logfile", "redis.log", "--daemonize", "no")
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
		if err := cmd.Start(); err != nil {
			return nil, err
		}
		s := &Server{Addr: "127.0.0.1:" + strconv.Itoa(port), dir: dir, cmd: cmd, done: make(chan struct{})}
		go func() { cmd.Wait(); close(s.done) }()
		if s.answers() {
			return s, nil
		}
		cmd.Process.Kill()
		<-s.done
	}
	os.RemoveAll(dir)
	return nil, fmt.Errorf("redis-server did not start")
}

func (s *Server) answers() bool {
	c := redis.NewClient(&redis.Options{Addr: s.Addr, MaxRetries: -1, DialTimeout: 200 * time.Millisecond})
	defer c.Close()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		select {
		case <-s.done:
			return false
		default:
		}
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		info, err := c.Info(ctx, "server").Result()
		cancel()
		if err == nil {
			return strings.Contains(info, "process_id:"+strconv.Itoa(s.cmd.Process.Pid)+"\r")
		}
	}
	return false
}

// Stop kills the server and removes its directory.
func (s *Server) Stop() {
	s.cmd.Process.Kill()
	<-s.done
	os.RemoveAll(s.dir)
}
