package redistest

import (
	"net"
	"strconv"
	"strings"
	"testing"
)

// TestPortTaken: a server whose port is taken between the pick and the
// start (by another process, here a listener) starts on another port; a
// cluster node too, whose bus port is taken.
func TestPortTaken(t *testing.T) {
	t.Parallel()
	binaries(t, "redis-server")
	for _, tc := range []struct {
		name    string
		cluster bool
		bus     bool
	}{
		{"server", false, false},
		{"cluster node", true, false},
		{"cluster bus", true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			// Take the port the server picked (another process could
			// have taken it first: then pick again).
			var s *Server
			var l net.Listener
			for l == nil {
				s = newServer(t, tc.cluster)
				taken := s.Addr
				if tc.bus {
					_, p, _ := net.SplitHostPort(s.Addr)
					port, _ := strconv.Atoi(p)
					taken = "127.0.0.1:" + strconv.Itoa(port+10000)
				}
				l, _ = net.Listen("tcp", taken)
			}
			defer l.Close()
			first := s.Addr
			if err := s.first(); err != nil {
				t.Fatal(err)
			}
			if s.Addr == first {
				t.Fatalf("started on %s, which was taken", first)
			}
			if err := s.Client().Ping(t.Context()).Err(); err != nil {
				t.Fatalf("PING on %s: %v", s.Addr, err)
			}
		})
	}
}

// TestPortTakenByRedis: a server whose port another redis-server took
// does not mistake that server for itself: it starts on another port.
func TestPortTakenByRedis(t *testing.T) {
	t.Parallel()
	other := Start(t)
	s := newServer(t, false)
	_, port, _ := net.SplitHostPort(other.Addr)
	s.args[1], s.Addr = port, other.Addr // as if other took it after the pick
	if err := s.first(); err != nil {
		t.Fatal(err)
	}
	if s.Addr == other.Addr {
		t.Fatalf("started on %s, the other server's port", s.Addr)
	}
	mine, theirs := s.Client().Info(t.Context(), "server").Val(), other.Client().Info(t.Context(), "server").Val()
	if pid := "process_id:" + strconv.Itoa(s.Pid()) + "\r\n"; !strings.Contains(mine, pid) || strings.Contains(theirs, pid) {
		t.Fatalf("the server on %s is not process %d", s.Addr, s.Pid())
	}
}
