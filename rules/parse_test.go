package rules

import (
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/slidelimit/slidelimit/internal/rulelimits"
)

const (
	ms  = time.Millisecond
	sec = time.Second
	mn  = time.Minute
	hr  = time.Hour
	day = 24 * time.Hour
)

func lim(k Kind, name string, ws ...Window) Rule {
	return Rule{Kind: k, Name: name, Windows: ws}
}

func win(limit int64, p time.Duration) Window { return Window{Limit: limit, Period: p} }

// grained is a window with a grain.
func grained(limit int64, p, grain time.Duration) Window {
	return Window{Limit: limit, Period: p, Grain: grain}
}

// costly is a rule with a cost.
func costly(k Kind, name, cost string, ws ...Window) Rule {
	return Rule{Kind: k, Name: name, Cost: cost, Windows: ws}
}

func TestParse(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in   string
		want Group
	}{
		{"ip:5/s,100/min", Group{Rules: []Rule{lim(IP, "", win(5, sec), win(100, mn))}}},
		{"user:10/min,200/d; ip:30/min; global:1000/h", Group{Rules: []Rule{
			lim(User, "", win(10, mn), win(200, day)),
			lim(IP, "", win(30, mn)),
			lim(Global, "", win(1000, hr)),
		}}},
		{"ip:10/30s", Group{Rules: []Rule{lim(IP, "", win(10, 30*sec))}}},
		{"ip:10k/h,100k/d", Group{Rules: []Rule{lim(IP, "", win(10_000, hr), win(100_000, day))}}},
		{"ip:2Ki/min,64Ki/d", Group{Rules: []Rule{lim(IP, "", win(2048, mn), win(65_536, day))}}},
		{"ip:50/500ms", Group{Rules: []Rule{lim(IP, "", win(50, 500*ms))}}},
		{"ip:3/1h", Group{Rules: []Rule{lim(IP, "", win(3, hr))}}},
		{"ip:2/d", Group{Rules: []Rule{lim(IP, "", win(2, day))}}},
		{"ip:5/s", Group{Rules: []Rule{lim(IP, "", win(5, sec))}}},
		{"ip:1/sec,2/m,3/2min,4/hour,5/day,6/7ms", Group{Rules: []Rule{lim(IP, "",
			win(1, sec), win(2, mn), win(3, 2*mn), win(4, hr), win(5, day), win(6, 7*ms))}}},
		{"ip:1/2sec,2/3m,4/5hour,6/7day", Group{Rules: []Rule{lim(IP, "",
			win(1, 2*sec), win(2, 3*mn), win(4, 5*hr), win(6, 7*day))}}},
		{"ip:100000/30d,1/1ms", Group{Rules: []Rule{lim(IP, "", win(100000, 30*day), win(1, ms))}}},
		{"ip:007/0010s", Group{Rules: []Rule{lim(IP, "", win(7, 10*sec))}}},
		{"header(x-api-key):5/s", Group{Rules: []Rule{lim(Header, "X-Api-Key", win(5, sec))}}},
		{"header(X-API-Key):5/s", Group{Rules: []Rule{lim(Header, "X-Api-Key", win(5, sec))}}},
		{"header(X&y~1):5/s", Group{Rules: []Rule{lim(Header, "X&y~1", win(5, sec))}}},
		{"param(id):5/s", Group{Rules: []Rule{lim(Param, "id", win(5, sec))}}},
		{"param(_file2):5/s", Group{Rules: []Rule{lim(Param, "_file2", win(5, sec))}}},
		{"key(tenant.id-1_x):5/s", Group{Rules: []Rule{lim(Key, "tenant.id-1_x", win(5, sec))}}},
		{"exempt:superadmin", Group{Exempt: []string{"superadmin"}}},
		{"ip:5/s; exempt:superadmin,ops", Group{
			Rules:  []Rule{lim(IP, "", win(5, sec))},
			Exempt: []string{"superadmin", "ops"},
		}},
		{"ip:5/s; exempt:a; exempt:b,c", Group{
			Rules:  []Rule{lim(IP, "", win(5, sec))},
			Exempt: []string{"a", "b", "c"},
		}},
		{"role(admin)=ip:30/min", Group{RoleRules: []RoleRules{
			{Role: "admin", Rules: []Rule{lim(IP, "", win(30, mn))}},
		}}},
		{"role(admin)=ip:30/min & global:1000/h", Group{RoleRules: []RoleRules{
			{Role: "admin", Rules: []Rule{lim(IP, "", win(30, mn)), lim(Global, "", win(1000, hr))}},
		}}},
		{"ip:5/s; role(admin)=ip:30/min,600/h & header(x-k):9/s; role(bot.v2)=key(k):1/s", Group{
			Rules: []Rule{lim(IP, "", win(5, sec))},
			RoleRules: []RoleRules{
				{Role: "admin", Rules: []Rule{lim(IP, "", win(30, mn), win(600, hr)), lim(Header, "X-K", win(9, sec))}},
				{Role: "bot.v2", Rules: []Rule{lim(Key, "k", win(1, sec))}},
			},
		}},
		{"ip:5/s; scope:downloads", Group{Rules: []Rule{lim(IP, "", win(5, sec))}, Scope: "downloads"}},
		{"ip:5/s; mode:shadow", Group{Rules: []Rule{lim(IP, "", win(5, sec))}, Mode: Shadow}},
		{"ip:5/s; mode:enforce", Group{Rules: []Rule{lim(IP, "", win(5, sec))}}},
		{"ip:5/s; fail:open", Group{Rules: []Rule{lim(IP, "", win(5, sec))}, Fail: FailOpen}},
		{"ip:5/s; fail:closed", Group{Rules: []Rule{lim(IP, "", win(5, sec))}, Fail: FailClosed}},
		{"ip:5/s; fail:local", Group{Rules: []Rule{lim(IP, "", win(5, sec))}, Fail: FailLocal}},
		{"ip:100/min; block:1h", Group{Rules: []Rule{lim(IP, "", win(100, mn))}, Block: hr}},
		{"key(account):5/d; count:401; block : 15 m", Group{Rules: []Rule{lim(Key, "account", win(5, 24*hr))}, Count: []string{"401"}, Block: 15 * mn}},
		{"ip:5/s;", Group{Rules: []Rule{lim(IP, "", win(5, sec))}}},
		{"\t ip : 5 / 30 s , 10 / min ; role ( a ) = ip : 1 / s & header ( x ) : 2 / s ; exempt : b , c ; scope : d ; mode : shadow ; fail : open ; \t", Group{
			Rules:     []Rule{lim(IP, "", win(5, 30*sec), win(10, mn))},
			RoleRules: []RoleRules{{Role: "a", Rules: []Rule{lim(IP, "", win(1, sec)), lim(Header, "X", win(2, sec))}}},
			Exempt:    []string{"b", "c"},
			Scope:     "d",
			Mode:      Shadow,
			Fail:      FailOpen,
		}},
		{"fail:local; mode:shadow; scope:s; exempt:e; role(r)=user:1/s; ip:2/s", Group{
			Rules:     []Rule{lim(IP, "", win(2, sec))},
			RoleRules: []RoleRules{{Role: "r", Rules: []Rule{lim(User, "", win(1, sec))}}},
			Exempt:    []string{"e"},
			Scope:     "s",
			Mode:      Shadow,
			Fail:      FailLocal,
		}},
		{"key(account):5/d; ip:50/h; count:401", Group{
			Rules: []Rule{lim(Key, "account", win(5, day)), lim(IP, "", win(50, hr))},
			Count: []string{"401"},
		}},
		{"ip:1/s; count : 4xx , 5xx ;", Group{Rules: []Rule{lim(IP, "", win(1, sec))}, Count: []string{"4xx", "5xx"}}},
		{"ip:1/s; count:401,403,429,100,599", Group{Rules: []Rule{lim(IP, "", win(1, sec))}, Count: []string{"401", "403", "429", "100", "599"}}},
		// Costs and grains.
		{"user:10/min; user[bytes]:2Gi/d", Group{Rules: []Rule{
			lim(User, "", win(10, mn)), costly(User, "", "bytes", win(2<<30, day)),
		}}},
		{"key(account)[bytes]:1Gi/d", Group{Rules: []Rule{costly(Key, "account", "bytes", win(1<<30, day))}}},
		{"header(x-a)[up.load_2-b]:5/s", Group{Rules: []Rule{costly(Header, "X-A", "up.load_2-b", win(5, sec))}}},
		{"ip[5]:100/min", Group{Rules: []Rule{costly(IP, "", "5", win(100, mn))}}},
		{"ip[005]:100/min,5/s", Group{Rules: []Rule{costly(IP, "", "5", win(100, mn), win(5, sec))}}},
		{"ip[1]:1/s; ip:1/min", Group{Rules: []Rule{costly(IP, "", "1", win(1, sec)), lim(IP, "", win(1, mn))}}},
		{"ip:20000/d~15m", Group{Rules: []Rule{lim(IP, "", grained(20000, day, 15*mn))}}},
		{"user:200/10s,5000/h,20000/d~15min", Group{Rules: []Rule{lim(User, "",
			win(200, 10*sec), win(5000, hr), grained(20000, day, 15*mn))}}},
		{"ip:10/s~100ms,2/1500ms~500ms,3/30d~3h", Group{Rules: []Rule{lim(IP, "",
			grained(10, sec, 100*ms), grained(2, 1500*ms, 500*ms), grained(3, 30*day, 3*hr))}}},
		{"ip:1/d~9s", Group{Rules: []Rule{lim(IP, "", grained(1, day, 9*sec))}}},
		{"ip:1125899906842624/d~h; user[bytes]:1Ti/d; global[7]:1M/s", Group{Rules: []Rule{
			lim(IP, "", grained(rulelimits.MaxBoundedLimit, day, hr)),
			costly(User, "", "bytes", win(1<<40, day)),
			costly(Global, "", "7", win(1_000_000, sec)),
		}}},
		{" user [ bytes ] : 2Gi / d ~ 1 h , 5Mi / min ; role ( a ) = key ( k ) [ 3 ] : 9 / s ~ 100 ms ", Group{
			Rules:     []Rule{costly(User, "", "bytes", grained(2<<30, day, hr), win(5<<20, mn))},
			RoleRules: []RoleRules{{Role: "a", Rules: []Rule{costly(Key, "k", "3", grained(9, sec, 100*ms))}}},
		}},
		{"role(a)=user[bytes]:1Gi/d~1h & user:5/s & user[2]:10/s", Group{RoleRules: []RoleRules{{Role: "a", Rules: []Rule{
			costly(User, "", "bytes", grained(1<<30, day, hr)), lim(User, "", win(5, sec)), costly(User, "", "2", win(10, sec)),
		}}}}},
		{"user:1/s; ip:1/s; header(a):1/s; header(b):1/s; param(a):1/s; key(a):1/s; global:1/s", Group{Rules: []Rule{
			lim(User, "", win(1, sec)), lim(IP, "", win(1, sec)), lim(Header, "A", win(1, sec)),
			lim(Header, "B", win(1, sec)), lim(Param, "a", win(1, sec)), lim(Key, "a", win(1, sec)),
			lim(Global, "", win(1, sec)),
		}}},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			t.Parallel()
			got, err := Parse(tt.in)
			if err != nil {
				t.Fatalf("Parse(%q): %v", tt.in, err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("Parse(%q)\n got %#v\nwant %#v", tt.in, got, tt.want)
			}
			if g := MustParse(tt.in); !reflect.DeepEqual(g, got) {
				t.Errorf("MustParse(%q) = %#v, Parse gave %#v", tt.in, g, got)
			}
		})
	}
}

func TestParseErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in   string
		cat  error
		want string
	}{
		// Empty input and statements.
		{"", errSyntax, `rules: "": empty rule group at offset 0`},
		{" \t", errSyntax, `rules: " \t": empty rule group at offset 2`},
		{";", errSyntax, `rules: ";": empty statement at offset 0`},
		{"ip:5/s;;", errSyntax, `rules: "ip:5/s;;": empty statement at offset 7`},
		{"ip:5/s; ;", errSyntax, `rules: "ip:5/s; ;": empty statement at offset 8`},
		{";ip:5/s", errSyntax, `rules: ";ip:5/s": empty statement at offset 0`},

		// Windows.
		{"ip:5/fortnight", errSyntax, `rules: "ip:5/fortnight": unknown unit "fortnight" at offset 5`},
		{"ip:5/S", errSyntax, `rules: "ip:5/S": unknown unit "S" at offset 5`},
		{"ip:5/mins", errSyntax, `rules: "ip:5/mins": unknown unit "mins" at offset 5`},
		{"ip:/s", errSyntax, `rules: "ip:/s": expected a limit, found "/" at offset 3`},
		{"ip:", errSyntax, `rules: "ip:": expected a limit, found end of input at offset 3`},
		{"ip:-1/s", errSyntax, `rules: "ip:-1/s": expected a limit, found "-" at offset 3`},
		{"ip:5", errSyntax, `rules: "ip:5": expected "/" after the limit, found end of input at offset 4`},
		{"ip:5/", errSyntax, `rules: "ip:5/": expected a unit, found end of input at offset 5`},
		{"ip:5/30", errSyntax, `rules: "ip:5/30": expected a unit, found end of input at offset 7`},
		{"ip:5/s,", errSyntax, `rules: "ip:5/s,": expected a limit, found end of input at offset 7`},
		{"ip:5/s,,6/min", errSyntax, `rules: "ip:5/s,,6/min": expected a limit, found "," at offset 7`},
		{"ip:1.5/s", errSyntax, `rules: "ip:1.5/s": expected "/" after the limit, found "." at offset 4`},
		{"ip:0/s", errInvalid, `rules: "ip:0/s": limit 0 is below 1 at offset 3`},
		{"ip:100001/s", errInvalid, `rules: "ip:100001/s": limit 100001 is above 100000; redis sorted-set memory grows with the limit; a window with a grain, as in 20000/d~15min, may go up to 1125899906842624 at offset 3`},
		{"ip:0k/s", errInvalid, `rules: "ip:0k/s": limit 0 is below 1 at offset 3`},
		{"ip:1M/s", errInvalid, `rules: "ip:1M/s": limit 1000000 is above 100000; redis sorted-set memory grows with the limit; a window with a grain, as in 20000/d~15min, may go up to 1125899906842624 at offset 3`},
		{"ip:2Gi/d", errInvalid, `rules: "ip:2Gi/d": limit 2147483648 is above 100000; redis sorted-set memory grows with the limit; a window with a grain, as in 20000/d~15min, may go up to 1125899906842624 at offset 3`},
		{"ip:9999999T/s", errInvalid, `rules: "ip:9999999T/s": limit 9999999T is above 100000; redis sorted-set memory grows with the limit; a window with a grain, as in 20000/d~15min, may go up to 1125899906842624 at offset 3`},
		{"ip:9999999Ti/s", errInvalid, `rules: "ip:9999999Ti/s": limit 9999999Ti is above 100000; redis sorted-set memory grows with the limit; a window with a grain, as in 20000/d~15min, may go up to 1125899906842624 at offset 3`},
		{"ip:10K/s", errSyntax, `rules: "ip:10K/s": unknown limit suffix "K"; want k, M, G, T (×1000) or Ki, Mi, Gi, Ti (×1024) at offset 5`},
		{"ip:10kb/s", errSyntax, `rules: "ip:10kb/s": unknown limit suffix "kb"; want k, M, G, T (×1000) or Ki, Mi, Gi, Ti (×1024) at offset 5`},
		{"ip:10 k/s", errSyntax, `rules: "ip:10 k/s": expected "/" after the limit, found "k" at offset 6`},
		{"ip:99999999999999999999/s", errInvalid, `rules: "ip:99999999999999999999/s": limit 99999999999999999999 is above 100000; redis sorted-set memory grows with the limit; a window with a grain, as in 20000/d~15min, may go up to 1125899906842624 at offset 3`},
		{"ip:1/0ms", errInvalid, `rules: "ip:1/0ms": period 0s is below 1ms at offset 5`},
		{"ip:1/0d", errInvalid, `rules: "ip:1/0d": period 0s is below 1ms at offset 5`},
		{"ip:1/500us", errInvalid, `rules: "ip:1/500us": period 500us is below 1ms at offset 5`},
		{"ip:1/500µs", errInvalid, `rules: "ip:1/500µs": period 500µs is below 1ms at offset 5`},
		{"ip:1/us", errInvalid, `rules: "ip:1/us": period 1us is below 1ms at offset 5`},
		{"ip:1/1ns", errInvalid, `rules: "ip:1/1ns": period 1ns is below 1ms at offset 5`},
		{"ip:1/2000us", errSyntax, `rules: "ip:1/2000us": unsupported unit "us"; periods are whole milliseconds at offset 9`},
		{"ip:1/31d", errInvalid, `rules: "ip:1/31d": period 31d is above 30d at offset 5`},
		{"ip:1/721h", errInvalid, `rules: "ip:1/721h": period 721h is above 30d at offset 5`},
		{"ip:1/99999999999999999999d", errInvalid, `rules: "ip:1/99999999999999999999d": period 99999999999999999999d is above 30d at offset 5`},
		{"ip:1/9999999999999999ms", errInvalid, `rules: "ip:1/9999999999999999ms": period 9999999999999999ms is above 30d at offset 5`},
		{"ip:1/106752d", errInvalid, `rules: "ip:1/106752d": period 106752d is above 30d at offset 5`},
		{"ip:5/s,6/1s", errInvalid, `rules: "ip:5/s,6/1s": duplicate period 1s in rule ip at offset 7`},
		{"ip:5/min,6/60s", errInvalid, `rules: "ip:5/min,6/60s": duplicate period 1min in rule ip at offset 9`},

		// Costs.
		{"user[]:1/s", errSyntax, `rules: "user[]:1/s": expected a cost function name or a positive integer after "user[", found "]" at offset 5`},
		{"user[:1/s", errSyntax, `rules: "user[:1/s": expected a cost function name or a positive integer after "user[", found ":" at offset 5`},
		{"user[bytes:1/s", errSyntax, `rules: "user[bytes:1/s": expected "]" after the cost, found ":" at offset 10`},
		{"user[by tes]:1/s", errSyntax, `rules: "user[by tes]:1/s": expected "]" after the cost, found "t" at offset 8`},
		{"user[bytes]", errSyntax, `rules: "user[bytes]": expected ":" after "user[bytes]", found end of input at offset 11`},
		{"user[bytes](x):1/s", errSyntax, `rules: "user[bytes](x):1/s": expected ":" after "user[bytes]", found "(" at offset 11`},
		{"key(a)[b][c]:1/s", errSyntax, `rules: "key(a)[b][c]:1/s": expected ":" after "key(a)[b]", found "[" at offset 9`},
		{"user[1bytes]:1/s", errInvalid, `rules: "user[1bytes]:1/s": invalid cost "1bytes"; want a positive integer or a cost function name: a letter, then letters, digits, "_", "-" or "." at offset 5`},
		{"user[by/tes]:1/s", errInvalid, `rules: "user[by/tes]:1/s": invalid cost "by/tes"; want a positive integer or a cost function name: a letter, then letters, digits, "_", "-" or "." at offset 5`},
		{"user[-5]:1/s", errInvalid, `rules: "user[-5]:1/s": invalid cost "-5"; want a positive integer or a cost function name: a letter, then letters, digits, "_", "-" or "." at offset 5`},
		{"user[_x]:1/s", errInvalid, `rules: "user[_x]:1/s": invalid cost "_x"; want a positive integer or a cost function name: a letter, then letters, digits, "_", "-" or "." at offset 5`},
		{"user[0]:1/s", errInvalid, `rules: "user[0]:1/s": cost 0 is below 1 at offset 5`},
		{"user[000]:1/s", errInvalid, `rules: "user[000]:1/s": cost 0 is below 1 at offset 5`},
		{"ip[5]:3/min", errInvalid, `rules: "ip[5]:3/min": cost 5 is above the limit 3 of window 3/min; such a request could never be admitted at offset 6`},
		{"ip[5]:10/s, 3/min", errInvalid, `rules: "ip[5]:10/s, 3/min": cost 5 is above the limit 3 of window 3/min; such a request could never be admitted at offset 12`},
		{"ip[99999999999999999999]:10/s", errInvalid, `rules: "ip[99999999999999999999]:10/s": cost 99999999999999999999 is above the limit 10 of window 10/s; such a request could never be admitted at offset 25`},
		{"user[bytes]:1/s; user[bytes]:2/min", errInvalid, `rules: "user[bytes]:1/s; user[bytes]:2/min": duplicate rule user[bytes]; put all its windows in one rule at offset 17`},
		{"ip[5]:10/s; ip[05]:50/min", errInvalid, `rules: "ip[5]:10/s; ip[05]:50/min": duplicate rule ip[5]; put all its windows in one rule at offset 12`},
		{"user[bytes]:1/s,2/1s", errInvalid, `rules: "user[bytes]:1/s,2/1s": duplicate period 1s in rule user[bytes] at offset 16`},

		// Grains.
		{"ip:1/d~d", errInvalid, `rules: "ip:1/d~d": grain 1d is not shorter than the period 1d at offset 7`},
		{"ip:1/d~2d", errInvalid, `rules: "ip:1/d~2d": grain 2d is not shorter than the period 1d at offset 7`},
		{"ip:1/d~24h", errInvalid, `rules: "ip:1/d~24h": grain 1d is not shorter than the period 1d at offset 7`},
		{"ip:1/d~99999999999999999999d", errInvalid, `rules: "ip:1/d~99999999999999999999d": grain 99999999999999999999d is not shorter than the period 1d at offset 7`},
		{"ip:1/d~7min", errInvalid, `rules: "ip:1/d~7min": grain 7min does not divide the period 1d into whole grains at offset 7`},
		{"ip:1/h~7ms", errInvalid, `rules: "ip:1/h~7ms": grain 7ms does not divide the period 1h into whole grains at offset 7`},
		{"ip:1/d~1s", errInvalid, `rules: "ip:1/d~1s": grain 1s splits the period 1d into 86400 grains; at most 10000 are allowed (a grain denies at most one grain early, so finer ones gain little and cost memory) at offset 7`},
		{"ip:1/d~8s", errInvalid, `rules: "ip:1/d~8s": grain 8s splits the period 1d into 10800 grains; at most 10000 are allowed (a grain denies at most one grain early, so finer ones gain little and cost memory) at offset 7`},
		{"ip:1/s~500us", errInvalid, `rules: "ip:1/s~500us": grain 500us is below 1ms at offset 7`},
		{"ip:1/s~0ms", errInvalid, `rules: "ip:1/s~0ms": grain 0s is below 1ms at offset 7`},
		{"ip:1/s~1500us", errSyntax, `rules: "ip:1/s~1500us": unsupported unit "us"; grains are whole milliseconds at offset 11`},
		{"ip:1/s~", errSyntax, `rules: "ip:1/s~": expected a unit, found end of input at offset 7`},
		{"ip:1/s~15", errSyntax, `rules: "ip:1/s~15": expected a unit, found end of input at offset 9`},
		{"ip:1/s~~1ms", errSyntax, `rules: "ip:1/s~~1ms": expected a unit, found "~" at offset 7`},
		{"ip:1/s~fortnight", errSyntax, `rules: "ip:1/s~fortnight": unknown unit "fortnight" at offset 7`},
		{"ip:1/s~1ms~1ms", errSyntax, `rules: "ip:1/s~1ms~1ms": expected "," or ";", found "~" at offset 10`},
		{"ip:1~1ms/s", errSyntax, `rules: "ip:1~1ms/s": expected "/" after the limit, found "~" at offset 4`},

		// Caps with grains and costs.
		{"ip:2Gi/d", errInvalid, `rules: "ip:2Gi/d": limit 2147483648 is above 100000; redis sorted-set memory grows with the limit; a window with a grain, as in 20000/d~15min, may go up to 1125899906842624 at offset 3`},
		{"ip:1/s,100001/d~1h,100001/h", errInvalid, `rules: "ip:1/s,100001/d~1h,100001/h": limit 100001 is above 100000; redis sorted-set memory grows with the limit; a window with a grain, as in 20000/d~15min, may go up to 1125899906842624 at offset 19`},
		{"ip:1125899906842625/d~h", errInvalid, `rules: "ip:1125899906842625/d~h": limit 1125899906842625 is above 1125899906842624 (2^50), the largest limit, so that sums of costs stay exact in redis's lua numbers at offset 3`},
		{"ip[bytes]:1025Ti/d", errInvalid, `rules: "ip[bytes]:1025Ti/d": limit 1126999418470400 is above 1125899906842624 (2^50), the largest limit, so that sums of costs stay exact in redis's lua numbers at offset 10`},
		{"ip[bytes]:9999999Ti/d", errInvalid, `rules: "ip[bytes]:9999999Ti/d": limit 9999999Ti is above 1125899906842624 (2^50), the largest limit, so that sums of costs stay exact in redis's lua numbers at offset 10`},
		{"ip:9999999Ti/d~1h", errInvalid, `rules: "ip:9999999Ti/d~1h": limit 9999999Ti is above 1125899906842624 (2^50), the largest limit, so that sums of costs stay exact in redis's lua numbers at offset 3`},
		{"ip:99999999999999999999/d~1h", errInvalid, `rules: "ip:99999999999999999999/d~1h": limit 99999999999999999999 is above 1125899906842624 (2^50), the largest limit, so that sums of costs stay exact in redis's lua numbers at offset 3`},

		// Rules.
		{"ip:5/s; ip:6/min", errInvalid, `rules: "ip:5/s; ip:6/min": duplicate rule ip; put all its windows in one rule at offset 8`},
		{"header(x-a):1/s; header(X-A):2/s", errInvalid, `rules: "header(x-a):1/s; header(X-A):2/s": duplicate rule header(X-A); put all its windows in one rule at offset 17`},
		{"role(a)=ip:1/s & ip:2/s", errInvalid, `rules: "role(a)=ip:1/s & ip:2/s": duplicate rule ip; put all its windows in one rule at offset 17`},
		{"header:5/s", errInvalid, `rules: "header:5/s": kind header needs a name, as in header(name) at offset 0`},
		{"param:5/s", errInvalid, `rules: "param:5/s": kind param needs a name, as in param(name) at offset 0`},
		{"key:1/s", errInvalid, `rules: "key:1/s": kind key needs a name, as in key(name) at offset 0`},
		{"ip(x):5/s", errInvalid, `rules: "ip(x):5/s": kind ip takes no name at offset 3`},
		{"user(x):5/s", errInvalid, `rules: "user(x):5/s": kind user takes no name at offset 5`},
		{"global(x):1/s", errInvalid, `rules: "global(x):1/s": kind global takes no name at offset 7`},
		{"header():5/s", errSyntax, `rules: "header():5/s": expected a name after "header(", found ")" at offset 7`},
		{"header(a:5/s", errSyntax, `rules: "header(a:5/s": expected ")" after the name, found ":" at offset 8`},
		{"header(a b):5/s", errSyntax, `rules: "header(a b):5/s": expected ")" after the name, found "b" at offset 9`},
		{"header(a/b):5/s", errInvalid, `rules: "header(a/b):5/s": invalid header name "a/b"; want RFC 9110 token characters at offset 7`},
		{"param(1x):5/s", errInvalid, `rules: "param(1x):5/s": invalid param name "1x"; want a Go identifier, as in a ServeMux wildcard at offset 6`},
		{"param(a-b):5/s", errInvalid, `rules: "param(a-b):5/s": invalid param name "a-b"; want a Go identifier, as in a ServeMux wildcard at offset 6`},
		{"key(a/b):1/s", errInvalid, `rules: "key(a/b):1/s": invalid key name "a/b"; want letters, digits, "_", "-" or "." at offset 4`},
		{"foo:5/s", errSyntax, `rules: "foo:5/s": unknown kind or keyword "foo" at offset 0`},
		{"IP:5/s", errSyntax, `rules: "IP:5/s": unknown kind or keyword "IP" at offset 0`},
		{"ip5/s", errSyntax, `rules: "ip5/s": unknown kind or keyword "ip5" at offset 0`},
		{":5/s", errSyntax, `rules: ":5/s": expected a rule kind or keyword, found ":" at offset 0`},
		{"ip", errSyntax, `rules: "ip": expected ":" after "ip", found end of input at offset 2`},
		{"ip 5/s", errSyntax, `rules: "ip 5/s": expected ":" after "ip", found "5" at offset 3`},
		{"ip:5/s x", errSyntax, `rules: "ip:5/s x": expected "," or ";", found "x" at offset 7`},
		{"ip:5/s\n", errSyntax, `rules: "ip:5/s\n": expected "," or ";", found "\n" at offset 6`},
		{"ip:5/s; \xff", errSyntax, `rules: "ip:5/s; \xff": expected a rule kind or keyword, found "\xff" at offset 8`},

		// RoleRules.
		{"role(a b)=ip:1/s", errSyntax, `rules: "role(a b)=ip:1/s": expected ")" after the role name, found "b" at offset 7`},
		{"role(a/b)=ip:1/s", errInvalid, `rules: "role(a/b)=ip:1/s": invalid role name "a/b"; want letters, digits, "_", "-" or "." at offset 5`},
		{"role(Ädmin)=ip:1/s", errInvalid, `rules: "role(Ädmin)=ip:1/s": invalid role name "Ädmin"; want letters, digits, "_", "-" or "." at offset 5`},
		{"role()=ip:1/s", errSyntax, `rules: "role()=ip:1/s": expected a role name, found ")" at offset 5`},
		{"role a=ip:1/s", errSyntax, `rules: "role a=ip:1/s": expected "(" after "role", found "a" at offset 5`},
		{"role(a)", errSyntax, `rules: "role(a)": expected "=" after "role(a)", found end of input at offset 7`},
		{"role(a)=", errSyntax, `rules: "role(a)=": role(a)= has no rules at offset 8`},
		{"role(a)= ; ip:1/s", errSyntax, `rules: "role(a)= ; ip:1/s": role(a)= has no rules at offset 9`},
		{"role(a)=ip:1/s &", errSyntax, `rules: "role(a)=ip:1/s &": expected a rule kind, found end of input at offset 16`},
		{"role(a)=scope:x", errSyntax, `rules: "role(a)=scope:x": unknown kind "scope" at offset 8`},
		{"role(a)=ip:1/s x", errSyntax, `rules: "role(a)=ip:1/s x": expected ",", "&" or ";", found "x" at offset 15`},
		{"role(a)=ip:1/s; role(a)=user:1/s", errInvalid, `rules: "role(a)=ip:1/s; role(a)=user:1/s": duplicate role(a)= at offset 21`},

		// Exempt.
		{"exempt:", errSyntax, `rules: "exempt:": expected a role name, found end of input at offset 7`},
		{"exempt:a,", errSyntax, `rules: "exempt:a,": expected a role name, found end of input at offset 9`},
		{"exempt a", errSyntax, `rules: "exempt a": expected ":" after "exempt", found "a" at offset 7`},
		{"exempt:a,a", errInvalid, `rules: "exempt:a,a": duplicate exempt role "a" at offset 9`},
		{"exempt:a; exempt:a", errInvalid, `rules: "exempt:a; exempt:a": duplicate exempt role "a" at offset 17`},
		{"exempt:a/b", errInvalid, `rules: "exempt:a/b": invalid role name "a/b"; want letters, digits, "_", "-" or "." at offset 7`},
		{"exempt:a; role(a)=ip:1/s", errInvalid, `rules: "exempt:a; role(a)=ip:1/s": role "a" is both exempt and given role rules at offset 7`},

		// Scope, mode, fail.
		{"scope:", errSyntax, `rules: "scope:": expected a scope name, found end of input at offset 6`},
		{"ip:1/s; scope:a; scope:b", errInvalid, `rules: "ip:1/s; scope:a; scope:b": duplicate scope statement at offset 17`},
		{"ip:1/s; scope:a; scope:a", errInvalid, `rules: "ip:1/s; scope:a; scope:a": duplicate scope statement at offset 17`},
		{"ip:1/s; scope:a/b", errInvalid, `rules: "ip:1/s; scope:a/b": invalid scope name "a/b"; want letters, digits, "_", "-" or "." at offset 14`},
		{"scope:a", errInvalid, `rules: "scope:a": rule group has no rules at offset 0`},
		// Count.
		{"ip:1/s; count:", errSyntax, `rules: "ip:1/s; count:": expected a status code or class such as 401 or 4xx, found end of input at offset 14`},
		{"ip:1/s; count:401,", errSyntax, `rules: "ip:1/s; count:401,": expected a status code or class such as 401 or 4xx, found end of input at offset 18`},
		{"ip:1/s; count 401", errSyntax, `rules: "ip:1/s; count 401": expected ":" after "count", found "4" at offset 14`},
		{"ip:1/s; count:401 403", errSyntax, `rules: "ip:1/s; count:401 403": expected "," or ";", found "4" at offset 18`},
		{"ip:1/s; count:600", errInvalid, `rules: "ip:1/s; count:600": invalid status "600" in count; want a code 100..599 or a class 1xx..5xx at offset 14`},
		{"ip:1/s; count:099", errInvalid, `rules: "ip:1/s; count:099": invalid status "099" in count; want a code 100..599 or a class 1xx..5xx at offset 14`},
		{"ip:1/s; count:4XX", errInvalid, `rules: "ip:1/s; count:4XX": invalid status "4XX" in count; want a code 100..599 or a class 1xx..5xx at offset 14`},
		{"ip:1/s; count:40", errInvalid, `rules: "ip:1/s; count:40": invalid status "40" in count; want a code 100..599 or a class 1xx..5xx at offset 14`},
		{"ip:1/s; count:4x1", errInvalid, `rules: "ip:1/s; count:4x1": invalid status "4x1" in count; want a code 100..599 or a class 1xx..5xx at offset 14`},
		{"ip:1/s; count:401,401", errInvalid, `rules: "ip:1/s; count:401,401": duplicate status 401 in count at offset 18`},
		{"ip:1/s; count:4xx,4xx", errInvalid, `rules: "ip:1/s; count:4xx,4xx": duplicate status 4xx in count at offset 18`},
		{"ip:1/s; count:401,4xx", errInvalid, `rules: "ip:1/s; count:401,4xx": status 401 is already counted by class 4xx at offset 14`},
		{"ip:1/s; count:5xx,503", errInvalid, `rules: "ip:1/s; count:5xx,503": status 503 is already counted by class 5xx at offset 18`},
		{"ip:1/s; count:401; count:403", errInvalid, `rules: "ip:1/s; count:401; count:403": duplicate count statement at offset 19`},
		{"count:401", errInvalid, `rules: "count:401": rule group has no rules at offset 0`},
		{"scope:a/b", errInvalid, `rules: "scope:a/b": invalid scope name "a/b"; want letters, digits, "_", "-" or "." at offset 6`},
		{"mode:shadow", errInvalid, `rules: "mode:shadow": rule group has no rules at offset 0`},
		{"ip:1/s; mode:loud", errSyntax, `rules: "ip:1/s; mode:loud": unknown mode "loud"; want enforce or shadow at offset 13`},
		{"ip:1/s; mode:", errSyntax, `rules: "ip:1/s; mode:": expected a mode after "mode:", found end of input at offset 13`},
		{"ip:1/s; mode:shadow; mode:enforce", errInvalid, `rules: "ip:1/s; mode:shadow; mode:enforce": duplicate mode statement at offset 21`},
		{"ip:1/s; mode:enforce; mode:enforce", errInvalid, `rules: "ip:1/s; mode:enforce; mode:enforce": duplicate mode statement at offset 22`},
		{"ip:1/s; fail:maybe", errSyntax, `rules: "ip:1/s; fail:maybe": unknown fail mode "maybe"; want open, closed or local at offset 13`},
		{"ip:1/s; fail:", errSyntax, `rules: "ip:1/s; fail:": expected a fail mode after "fail:", found end of input at offset 13`},
		{"ip:1/s; fail:open; fail:closed", errInvalid, `rules: "ip:1/s; fail:open; fail:closed": duplicate fail statement at offset 19`},
		{"ip:1/s; block:0s", errInvalid, `rules: "ip:1/s; block:0s": block 0s is below 1ms at offset 14`},
		{"ip:1/s; block:31d", errInvalid, `rules: "ip:1/s; block:31d": block 31d is above 30d at offset 14`},
		{"ip:1/s; block:500us", errInvalid, `rules: "ip:1/s; block:500us": block 500us is below 1ms at offset 14`},
		{"ip:1/s; block:", errSyntax, `rules: "ip:1/s; block:": expected a unit, found end of input at offset 14`},
		{"ip:1/s; block:1s; block:2s", errInvalid, `rules: "ip:1/s; block:1s; block:2s": duplicate block statement at offset 18`},
		{"ip:1/s; fail:open x", errSyntax, `rules: "ip:1/s; fail:open x": expected ";", found "x" at offset 18`},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			t.Parallel()
			g, err := Parse(tt.in)
			if err == nil {
				t.Fatalf("Parse(%q) = %v, want error", tt.in, g)
			}
			if got := err.Error(); got != tt.want {
				t.Errorf("Parse(%q) error\n got %s\nwant %s", tt.in, got, tt.want)
			}
			if kindOf(err) != tt.cat {
				t.Errorf("Parse(%q) error %v does not wrap %v", tt.in, err, tt.cat)
			}
			var e *Error
			if !errors.As(err, &e) {
				t.Fatalf("Parse(%q) error is %T, want *Error", tt.in, err)
			}
			if e.Input != tt.in || e.Offset < 0 || e.Offset > len(tt.in) {
				t.Errorf("Parse(%q): Input %q, Offset %d", tt.in, e.Input, e.Offset)
			}
			if !reflect.DeepEqual(g, Group{}) {
				t.Errorf("Parse(%q) returned non-zero group %#v with error", tt.in, g)
			}
		})
	}
}

func TestMustParsePanics(t *testing.T) {
	t.Parallel()
	defer func() {
		r := recover()
		err, ok := r.(error)
		if !ok || err.Error() != `rules: "ip:0/s": limit 0 is below 1 at offset 3` {
			t.Errorf("MustParse panicked with %v", r)
		}
	}()
	MustParse("ip:0/s")
	t.Error("MustParse did not panic")
}

func TestParseWindow(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in   string
		want Window
		err  string
	}{
		{in: "10/30s", want: win(10, 30*sec)},
		{in: " 5 / s ", want: win(5, sec)},
		{in: "3/fortnight", err: `rules: "3/fortnight": unknown unit "fortnight" at offset 2`},
		{in: "0/s", err: `rules: "0/s": limit 0 is below 1 at offset 0`},
		{in: "1/31d", err: `rules: "1/31d": period 31d is above 30d at offset 2`},
		{in: "1/s,2/min", err: `rules: "1/s,2/min": expected end of window, found "," at offset 3`},
		{in: "", err: `rules: "": expected a limit, found end of input at offset 0`},
		{in: "20000/d~15m", want: grained(20000, day, 15*mn)},
		{in: "2Gi/d ~ 1h", want: grained(2<<30, day, hr)},
		{in: "200000/d", err: `rules: "200000/d": limit 200000 is above 100000; redis sorted-set memory grows with the limit; a window with a grain, as in 20000/d~15min, may go up to 1125899906842624 at offset 0`},
		{in: "1/d~7min", err: `rules: "1/d~7min": grain 7min does not divide the period 1d into whole grains at offset 4`},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			t.Parallel()
			got, err := parseWindow(tt.in)
			if tt.err != "" {
				if err == nil || err.Error() != tt.err {
					t.Fatalf("parseWindow(%q) = %v, %v; want error %s", tt.in, got, err, tt.err)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Fatalf("parseWindow(%q) = %v, %v; want %v", tt.in, got, err, tt.want)
			}
		})
	}
}
