package main

import (
	"bytes"
	"context"
	"net"
	"strings"
	"testing"
)

// TestPorts: demo ports N prints N distinct loopback ports that can be
// listened on, and refuses a bad N.
func TestPorts(t *testing.T) {
	t.Parallel()
	var out, errOut bytes.Buffer
	if code := run(context.Background(), []string{"ports", "3"}, &out, &errOut); code != 0 {
		t.Fatalf("exit %d: %s", code, errOut.String())
	}
	ports := strings.Fields(out.String())
	if len(ports) != 3 || ports[0] == ports[1] || ports[1] == ports[2] || ports[0] == ports[2] {
		t.Fatalf("ports 3 printed %q", out.String())
	}
	for _, p := range ports {
		l, err := net.Listen("tcp", "127.0.0.1:"+p)
		if err != nil {
			t.Errorf("port %s: %v", p, err)
			continue
		}
		l.Close()
	}
	for _, args := range [][]string{{"ports", "0"}, {"ports", "x"}, {"ports", "1", "2"}} {
		if code := run(context.Background(), args, &out, &errOut); code != 2 {
			t.Errorf("%q: exit %d, want 2", args, code)
		}
	}
}
