package rules

import (
	"sync"
	"testing"
	"time"

	"github.com/slidelimit/slidelimit/internal/rulelimits"
)

func TestValidate(t *testing.T) {
	t.Parallel()
	ip := func(ws ...Window) Rule { return Rule{Kind: IP, Windows: ws} }
	one := []Window{win(1, sec)}
	tests := []struct {
		name string
		g    Group
		want string // empty for a valid group
	}{
		{"rule", Group{Rules: []Rule{ip(win(5, sec))}}, ""},
		{"only exempt", Group{Exempt: []string{"a"}}, ""},
		{"only role rules", Group{RoleRules: []RoleRules{{Role: "a", Rules: []Rule{ip(one...)}}}}, ""},
		{"non-canonical header", Group{Rules: []Rule{{Kind: Header, Name: "x-a", Windows: one}}}, ""},
		{"empty slices", Group{Rules: []Rule{ip(one...)}, RoleRules: []RoleRules{}, Exempt: []string{}}, ""},
		{"zero", Group{}, `rules: "": rule group has no rules at offset 0`},
		{"no kind", Group{Rules: []Rule{{Windows: one}}}, `rules: ":1/s": missing rule kind at offset 0`},
		{"bad kind", Group{Rules: []Rule{{Kind: "foo", Windows: one}}}, `rules: "foo:1/s": unknown kind "foo" at offset 0`},
		{"no windows", Group{Rules: []Rule{ip()}}, `rules: "ip:": rule has no windows at offset 3`},
		{"negative limit", Group{Rules: []Rule{ip(win(-1, sec))}}, `rules: "ip:-1/s": limit -1 is below 1 at offset 3`},
		{"limit above max", Group{Rules: []Rule{ip(win(rulelimits.MaxLimit+1, sec))}}, `rules: "ip:100001/s": limit 100001 is above 100000; redis sorted-set memory grows with the limit; a window with a grain, as in 20000/d~15min, may go up to 1125899906842624 at offset 3`},
		{"fractional ms", Group{Rules: []Rule{ip(win(1, 1500*time.Microsecond))}}, `rules: "ip:1/1.5ms": period 1.5ms is not a whole number of milliseconds at offset 5`},
		{"negative period", Group{Rules: []Rule{ip(win(1, -sec))}}, `rules: "ip:1/-1s": period -1s is below 1ms at offset 5`},
		{"period above max", Group{Rules: []Rule{ip(win(1, rulelimits.MaxPeriod+ms))}}, `rules: "ip:1/2592000001ms": period 2592000001ms is above 30d at offset 5`},
		{"bad header", Group{Rules: []Rule{{Kind: Header, Name: "a b", Windows: one}}}, `rules: "header(a b):1/s": invalid header name "a b"; want RFC 9110 token characters at offset 7`},
		{"header case duplicate", Group{Rules: []Rule{{Kind: Header, Name: "x-a", Windows: one}, {Kind: Header, Name: "X-A", Windows: one}}}, `rules: "header(X-A):1/s; header(X-A):1/s": duplicate rule header(X-A); put all its windows in one rule at offset 17`},
		{"name on ip", Group{Rules: []Rule{{Kind: IP, Name: "x", Windows: one}}}, `rules: "ip(x):1/s": kind ip takes no name at offset 3`},
		{"role rules without rules", Group{RoleRules: []RoleRules{{Role: "a"}}}, `rules: "role(a)=": role(...)= has no rules at offset 8`},
		{"role rules without role", Group{RoleRules: []RoleRules{{Rules: []Rule{ip(one...)}}}}, `rules: "role()=ip:1/s": missing role name at offset 5`},
		{"empty exempt role", Group{Exempt: []string{""}}, `rules: "exempt:": invalid role name ""; want letters, digits, "_", "-" or "." at offset 7`},
		{"bad mode", Group{Exempt: []string{"a"}, Mode: "enforce"}, `rules: "exempt:a; mode:enforce": unknown mode "enforce"; want Enforce ("") or Shadow at offset 15`},
		{"bad fail", Group{Exempt: []string{"a"}, Fail: "x"}, `rules: "exempt:a; fail:x": unknown fail mode "x"; want FailDefault (""), FailOpen, FailClosed or FailLocal at offset 15`},
		{"bad block", Group{Exempt: []string{"a"}, Block: 1500 * time.Microsecond}, `rules: "exempt:a; block:1.5ms": block 1.5ms is not a whole number of milliseconds at offset 16`},
		{"bad scope", Group{Exempt: []string{"a"}, Scope: "a b"}, `rules: "exempt:a; scope:a b": invalid scope name "a b"; want letters, digits, "_", "-" or "." at offset 16`},
		{"count", Group{Rules: []Rule{ip(one...)}, Count: []string{"401", "5xx"}}, ""},
		{"bad count", Group{Rules: []Rule{ip(one...)}, Count: []string{"401", "abc"}}, `rules: "ip:1/s; count:401,abc": invalid status "abc" in count; want a code 100..599 or a class 1xx..5xx at offset 18`},
		{"empty count item", Group{Rules: []Rule{ip(one...)}, Count: []string{""}}, `rules: "ip:1/s; count:": invalid status "" in count; want a code 100..599 or a class 1xx..5xx at offset 14`},
		{"count covered by class", Group{Rules: []Rule{ip(one...)}, Count: []string{"4xx", "404"}}, `rules: "ip:1/s; count:4xx,404": status 404 is already counted by class 4xx at offset 18`},
		{"cost", Group{Rules: []Rule{ip(one...), {Kind: IP, Cost: "bytes", Windows: []Window{win(1<<40, day)}}}}, ""},
		{"non-canonical constant cost", Group{Rules: []Rule{{Kind: IP, Cost: "05", Windows: []Window{win(10, sec)}}}}, `rules: "ip[05]:10/s": invalid cost "05"; write a constant cost without leading zeros at offset 3`},
		{"zero cost", Group{Rules: []Rule{{Kind: IP, Cost: "0", Windows: one}}}, `rules: "ip[0]:1/s": cost 0 is below 1 at offset 3`},
		{"negative cost", Group{Rules: []Rule{{Kind: IP, Cost: "-1", Windows: one}}}, `rules: "ip[-1]:1/s": invalid cost "-1"; want a positive integer or a cost function name: a letter, then letters, digits, "_", "-" or "." at offset 3`},
		{"cost above limit", Group{Rules: []Rule{{Kind: Key, Name: "k", Cost: "2", Windows: []Window{win(5, sec), win(1, mn)}}}}, `rules: "key(k)[2]:5/s,1/min": cost 2 is above the limit 1 of window 1/min; such a request could never be admitted at offset 14`},
		{"cost equal to limit", Group{Rules: []Rule{{Kind: IP, Cost: "5", Windows: []Window{win(5, sec)}}}}, ""},
		{"grain", Group{Rules: []Rule{ip(grained(rulelimits.MaxBoundedLimit, day, 15*mn))}}, ""},
		{"negative grain", Group{Rules: []Rule{ip(grained(1, sec, -sec))}}, `rules: "ip:1/s~-1s": grain -1s is below 1ms at offset 7`},
		{"fractional grain", Group{Rules: []Rule{ip(grained(1, 3*sec, 1500*time.Microsecond))}}, `rules: "ip:1/3s~1.5ms": grain 1.5ms is not a whole number of milliseconds at offset 8`},
		{"grain of an invalid period", Group{Rules: []Rule{ip(grained(1, 0, sec))}}, `rules: "ip:1/0s~s": period 0s is below 1ms at offset 5`},
		{"grain longer than period", Group{Rules: []Rule{ip(grained(1, mn, hr))}}, `rules: "ip:1/min~h": grain 1h is not shorter than the period 1min at offset 9`},
		{"exact cap with cost", Group{Rules: []Rule{{Kind: IP, Cost: "c", Windows: []Window{win(rulelimits.MaxBoundedLimit+1, sec)}}}}, `rules: "ip[c]:1125899906842625/s": limit 1125899906842625 is above 1125899906842624 (2^50), the largest limit, so that sums of costs stay exact in redis's lua numbers at offset 6`},
		{"exact cap without cost", Group{Rules: []Rule{ip(win(rulelimits.MaxBoundedLimit+1, sec))}}, `rules: "ip:1125899906842625/s": limit 1125899906842625 is above 100000; redis sorted-set memory grows with the limit; a window with a grain, as in 20000/d~15min, may go up to 1125899906842624 at offset 3`},
		{"first of several", Group{Rules: []Rule{ip(win(1, sec), win(0, 0))}, Exempt: []string{"a", "a"}}, `rules: "ip:1/s,0/0s; exempt:a,a": limit 0 is below 1 at offset 7`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			err := tt.g.Validate()
			if tt.want == "" {
				if err != nil {
					t.Fatalf("Validate() = %v, want nil", err)
				}
				return
			}
			if err == nil || err.Error() != tt.want {
				t.Fatalf("Validate()\n got %v\nwant %s", err, tt.want)
			}
			if kindOf(err) != errInvalid {
				t.Errorf("Validate() = %v, does not wrap errInvalid", err)
			}
		})
	}
}

// TestBoundsMatchConstants keeps the bounds written in model.go's struct
// tags in step with rulelimits.MaxLimit, rulelimits.MinPeriod and rulelimits.MaxPeriod.
func TestBoundsMatchConstants(t *testing.T) {
	t.Parallel()
	check := func(w Window, ok bool) {
		t.Helper()
		g := Group{Rules: []Rule{{Kind: Global, Windows: []Window{w}}}}
		if err := g.Validate(); (err == nil) != ok {
			t.Errorf("Validate(%v) = %v, want ok=%v", w, err, ok)
		}
	}
	check(win(1, rulelimits.MinPeriod), true)
	check(win(rulelimits.MaxLimit, rulelimits.MaxPeriod), true)
	check(win(0, sec), false)
	check(win(rulelimits.MaxLimit+1, sec), false)
	check(win(1, rulelimits.MinPeriod-time.Nanosecond), false)
	check(win(1, rulelimits.MaxPeriod+time.Millisecond), false)
	check(grained(rulelimits.MaxBoundedLimit, rulelimits.MaxPeriod, rulelimits.MaxPeriod/maxGrains), true)
	check(grained(rulelimits.MaxBoundedLimit+1, sec, ms), false)
	check(grained(1, 2*minGrain, minGrain), true)
	check(grained(1, sec, minGrain-time.Nanosecond), false)
	check(grained(1, maxGrains*ms, ms), true)
	check(grained(1, (maxGrains+1)*ms, ms), false)
	costed := func(limit int64, ok bool) {
		t.Helper()
		g := Group{Rules: []Rule{{Kind: Global, Cost: "bytes", Windows: []Window{win(limit, sec)}}}}
		if err := g.Validate(); (err == nil) != ok {
			t.Errorf("Validate(global[bytes]:%d/s) = %v, want ok=%v", limit, err, ok)
		}
	}
	costed(rulelimits.MaxBoundedLimit, true)
	costed(rulelimits.MaxBoundedLimit+1, false)
	if rulelimits.MaxBoundedLimit >= 1<<53 {
		t.Errorf("rulelimits.MaxBoundedLimit %d is not exact in a float64", rulelimits.MaxBoundedLimit)
	}
}

func TestValidateConcurrent(t *testing.T) {
	t.Parallel()
	good := MustParse("user:10/min,200/d; ip:30/min; role(a)=global:1/s; exempt:b")
	bad := Group{Rules: []Rule{{Kind: IP, Windows: []Window{win(0, sec)}}}}
	var wg sync.WaitGroup
	for range 16 {
		wg.Go(func() {
			for range 50 {
				if err := good.Validate(); err != nil {
					t.Error(err)
				}
				if err := bad.Validate(); err == nil {
					t.Error("bad group validated")
				}
			}
		})
	}
	wg.Wait()
}
