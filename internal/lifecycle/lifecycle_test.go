package lifecycle

import (
	"testing"
	"time"

	"github.com/slidelimit/slidelimit/rules"
)

func TestBlockAndSlots(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		text  string
		block time.Duration
		slots bool
	}{
		{"ip:5/s; block:1h", time.Hour, false},
		{"ip:5/s; block:1h; mode:shadow", 0, false},
		{"ip:5/s, 2 concurrent", 0, true},
		{"ip:5/s; role(gold)=user:1 concurrent", 0, true},
	} {
		g := rules.MustParse(tt.text)
		if b, s := Block(&g), HoldsSlots(&g); b != tt.block || s != tt.slots {
			t.Errorf("%q: Block %v, HoldsSlots %v; want %v, %v", tt.text, b, s, tt.block, tt.slots)
		}
	}
}

func TestClientIPSubject(t *testing.T) {
	t.Parallel()
	c := ClientIP{V6Bits: 64}
	for peer, want := range map[string]string{
		"192.0.2.7:5123":       "ip:192.0.2.7",
		"[2001:db8::1]:443":    "ip:2001:db8::/64",
		"@":                    "peer:@",
		"[::ffff:192.0.2.7]:1": "ip:192.0.2.7",
	} {
		if got := c.Subject(peer, nil); got != want {
			t.Errorf("Subject(%q) = %q, want %q", peer, got, want)
		}
	}
}
