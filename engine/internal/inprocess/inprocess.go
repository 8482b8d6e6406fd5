// Package inprocess recognizes a Redis store that listens in this process:
// an embedded miniredis, which cannot be down while the process runs.
package inprocess

import (
	"bufio"
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"
)

// An embedded store (miniredis started by this process: the demo's default,
// quick tests, replays) cannot be down while the process runs: a call to it
// that takes long only waited for this process's own CPU. Taking the fail
// mode then would decide without the store for no reason (such as a sixth
// failed login admitted by fail:local).
// engine.New therefore gives an engine whose client talks to an embedded store a
// timeout of at least MinTimeout: a call waits for the store's answer
// unless it stalls that long. A closed store refuses connections, which
// still goes to the fail mode at once.
const MinTimeout = 5 * time.Second

// Probe bounds the INFO call that recognizes miniredis at New,
// whatever the timeout: a store in this process that is slow to answer it
// (a loaded machine) must still be recognized, and a server of this
// process that never answers (a test's fake) costs New no more.
const Probe = time.Second

// Miniredis reports whether rc is a client of a miniredis listening in
// this process, asking it for at most wait. The listener is looked up in /proc (Linux): a loopback
// address stands in for it where /proc cannot be read. Only then is the
// server asked INFO server, which miniredis refuses with "section (server)
// is not supported" (a real Redis answers it, and a fake server of a test
// that never answers is not recognized: its timeouts stay as configured).
func Miniredis(rc *redis.Client, wait time.Duration) bool {
	opt := rc.Options()
	if opt.Network != "" && opt.Network != "tcp" {
		return false
	}
	host, port, err := net.SplitHostPort(opt.Addr)
	if err != nil {
		return false
	}
	here, err := ListensHere(port)
	if err != nil {
		here = isLoopback(host)
	}
	if !here {
		return false
	}
	// A client of its own (the same options, one connection): the
	// application's hooks on rc see no command of New's, and a hook that
	// blocks cannot hold New.
	o := *opt
	o.PoolSize, o.MinIdleConns, o.MaxIdleConns, o.MaxRetries = 1, 0, 1, -1
	// Maintenance notifications off, and a push-notification processor of
	// its own: rc's config is shared through opt, and go-redis writes it
	// (under rc's lock, which NewClient does not take) when a server such as
	// miniredis refuses its handshake; rc's processor already holds the
	// notifications' handlers, so registering them again made NewClient log
	// "failed to initialize maintnotifications".
	o.MaintNotificationsConfig = &maintnotifications.Config{Mode: maintnotifications.ModeDisabled}
	o.PushNotificationProcessor = nil
	own := redis.NewClient(&o)
	defer own.Close()
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	err = own.Info(ctx, "server").Err()
	var re redis.Error
	return errors.As(err, &re) && strings.Contains(re.Error(), "section (server) is not supported")
}

// isLoopback reports whether host names this machine's loopback.
func isLoopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// ListensHere reports whether a TCP socket listening on port belongs to
// this process, from /proc/self/net/tcp{,6} and /proc/self/fd; an error
// means it cannot tell (no /proc).
func ListensHere(port string) (bool, error) {
	p, err := strconv.ParseUint(port, 10, 16)
	if err != nil {
		return false, err
	}
	want := strings.ToUpper(strconv.FormatUint(p, 16))
	for len(want) < 4 {
		want = "0" + want
	}
	inodes := map[string]bool{}
	read := 0
	for _, f := range []string{"/proc/self/net/tcp", "/proc/self/net/tcp6"} {
		if err := listeners(f, want, inodes); err == nil {
			read++
		}
	}
	if read == 0 {
		return false, errors.New("inprocess: /proc/self/net unreadable")
	}
	if len(inodes) == 0 {
		return false, nil
	}
	fds, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return false, err
	}
	for _, fd := range fds {
		l, err := os.Readlink(filepath.Join("/proc/self/fd", fd.Name()))
		if err == nil && strings.HasPrefix(l, "socket:[") && inodes[strings.TrimSuffix(l[len("socket:["):], "]")] {
			return true, nil
		}
	}
	return false, nil
}

// listeners adds to inodes the inodes of the sockets of table file (the
// format of /proc/net/tcp) listening (state 0A) on port want (4 hex
// digits).
func listeners(file, want string, inodes map[string]bool) error {
	f, err := os.Open(file)
	if err != nil {
		return err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Scan() // the header
	for sc.Scan() {
		fs := strings.Fields(sc.Text())
		if len(fs) < 10 || fs[3] != "0A" {
			continue
		}
		if _, p, ok := strings.Cut(fs[1], ":"); ok && p == want {
			inodes[fs[9]] = true
		}
	}
	return sc.Err()
}
