package rules

import (
	"reflect"
	"testing"
	"time"

	"github.com/slidelimit/slidelimit/internal/rulelimits"
)

func TestWindowString(t *testing.T) {
	t.Parallel()
	tests := []struct {
		w    Window
		want string
	}{
		{win(5, sec), "5/s"},
		{win(100, mn), "100/min"},
		{win(10, 30*sec), "10/30s"},
		{win(50, 500*ms), "50/500ms"},
		{win(3, hr), "3/h"},
		{win(2, day), "2/d"},
		{win(1, 90*mn), "1/90min"},
		{win(1, 1500*ms), "1/1500ms"},
		{win(1, 48*hr), "1/2d"},
		{win(1, 36*hr), "1/36h"},
		{win(1, rulelimits.MaxPeriod), "1/30d"},
		{win(1, 0), "1/0s"},
		{win(1, 1500*time.Microsecond), "1/1.5ms"},
		{grained(20000, day, 15*mn), "20000/d~15min"},
		{grained(2, 1500*ms, 500*ms), "2/1500ms~500ms"},
		{grained(1, 30*day, day), "1/30d~d"},
	}
	for _, tt := range tests {
		t.Run(tt.want, func(t *testing.T) {
			t.Parallel()
			if got := tt.w.String(); got != tt.want {
				t.Errorf("%#v.String() = %q, want %q", tt.w, got, tt.want)
			}
		})
	}
}

func TestCanonical(t *testing.T) {
	t.Parallel()
	tests := []struct{ in, want string }{
		{"ip:5/1s,100/60s", "ip:5/s,100/min"},
		{"ip:1/5400s", "ip:1/90min"},
		{"ip:1/1000ms,2/60min,3/24h,4/48hour", "ip:1/s,2/h,3/d,4/2d"},
		{"ip:1/sec,2/m,3/day", "ip:1/s,2/min,3/d"},
		{"header(x-api-key):5/s", "header(X-Api-Key):5/s"},
		{" ip : 5 / s ; ", "ip:5/s"},
		{"ip:5/s; mode:enforce", "ip:5/s"},
		{"exempt:a; exempt:b", "exempt:a,b"},
		{"role(admin)=ip:30/min&global:1000/h", "role(admin)=ip:30/min & global:1000/h"},
		{
			"fail:open; mode:shadow; scope:x; exempt:a; role(b)=ip:1/s; ip:2/s",
			"ip:2/s; role(b)=ip:1/s; exempt:a; scope:x; mode:shadow; fail:open",
		},
		{"count: 401 ,5xx; ip:1/s", "ip:1/s; count:401,5xx"},
		{"fail:local; count:5xx; scope:s; exempt:a; ip:1/s", "ip:1/s; exempt:a; count:5xx; scope:s; fail:local"},
		{"user [ bytes ] : 2Gi / 1d ~ 60m , 5Mi/60s", "user[bytes]:2147483648/d~h,5242880/min"},
		{"ip[007]:100/min; key(a)[x.y]:1k/d~3600s", "ip[7]:100/min; key(a)[x.y]:1000/d~h"},
		{"header(x-a)[bytes]:1/s; role(r)=ip[2]:4/s~500ms", "header(X-A)[bytes]:1/s; role(r)=ip[2]:4/s~500ms"},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			t.Parallel()
			g := MustParse(tt.in)
			if got := g.String(); got != tt.want {
				t.Fatalf("Parse(%q).String() = %q, want %q", tt.in, got, tt.want)
			}
			if g2 := MustParse(tt.want); !reflect.DeepEqual(g, g2) {
				t.Errorf("Parse(%q) = %#v, want %#v", tt.want, g2, g)
			}
		})
	}
}

func TestLimiterMethods(t *testing.T) {
	t.Parallel()
	tests := []struct {
		l       Rule
		id, str string
	}{
		{lim(IP, "", win(5, sec), win(100, mn)), "ip", "ip:5/s,100/min"},
		{lim(Header, "x-api-key", win(5, sec)), "header(X-Api-Key)", "header(X-Api-Key):5/s"},
		{lim(Param, "id", win(1, day), win(5, sec)), "param(id)", "param(id):1/d,5/s"},
		{lim(Key, "Tenant", win(1, sec)), "key(Tenant)", "key(Tenant):1/s"},
		{lim(Global, ""), "global", "global:"},
		{costly(User, "", "bytes", grained(1<<30, day, hr)), "user[bytes]", "user[bytes]:1073741824/d~h"},
		{costly(Header, "x-a", "5", win(10, sec)), "header(X-A)[5]", "header(X-A)[5]:10/s"},
	}
	for _, tt := range tests {
		t.Run(tt.str, func(t *testing.T) {
			t.Parallel()
			if got := tt.l.ID(); got != tt.id {
				t.Errorf("ID() = %q, want %q", got, tt.id)
			}
			if got := tt.l.String(); got != tt.str {
				t.Errorf("String() = %q, want %q", got, tt.str)
			}
		})
	}
	o := RoleRules{Role: "admin", Rules: []Rule{lim(IP, "", win(30, mn)), lim(Global, "", win(1000, hr))}}
	if got, want := o.String(), "role(admin)=ip:30/min & global:1000/h"; got != want {
		t.Errorf("RoleRules.String() = %q, want %q", got, want)
	}
}
