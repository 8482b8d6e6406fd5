package rules

import (
	"errors"
	"reflect"
	"strings"
	"testing"
)

var fuzzSeeds = []string{
	// Accepted.
	"ip:5/s,100/min",
	"user:10/min,200/d; ip:30/min; global:1000/h",
	"ip:10/30s,50/500ms,3/1h,2/d",
	"ip:1/sec,2/m,3/2min,4/hour,5/day",
	"header(x-api-key):5/s",
	"param(id):5/s; key(tenant.id):1/min",
	"exempt:superadmin",
	"ip:5/s; exempt:superadmin,ops",
	"role(admin)=ip:30/min",
	"role(admin)=ip:30/min & global:1000/h",
	"ip:5/s; scope:downloads; mode:shadow; fail:local",
	"ip:5/s; mode:enforce; fail:open;",
	"\t ip : 5 / 30 s , 10 / min ; role ( a ) = ip : 1 / s & header ( x ) : 2 / s ; exempt : b ; scope : d ; ",
	"ip:100000/30d,1/1ms",
	"ip:007/0010s",
	"key(account):5/d; count:401; block:15m",
	"ip:100/min; block:1h",
	"user:3 concurrent",
	"user:10/min,3 concurrent; ip:2concurrent",
	"role(free)=user:1 concurrent,5/h",
	// Rejected.
	"user:0 concurrent",
	"user:3 concurrent,2 concurrent",
	"user[bytes]:10/min,3 concurrent",
	"user:3 concurrent~1s",
	"user:3 concurrent/s",
	"user:100001 concurrent",
	"",
	";",
	"ip:5/s;;",
	"3/fortnight",
	"ip:/s",
	"ip:0/s",
	"ip:100001/s",
	"ip:99999999999999999999/s",
	"ip:1/0ms",
	"ip:1/500us",
	"ip:1/99999999999999999999d",
	"ip:1/31d",
	"ip:5/s,6/1s",
	"ip:5/s; ip:6/min",
	"header:5/s",
	"ip(x):5/s",
	"foo:5/s",
	"role(a b)=ip:1/s",
	"role(a)=",
	"mode:loud",
	"fail:maybe",
	"ip:1/s; block:0s",
	"ip:1/s; block:1s; block:1h",
	"scope:a; scope:b",
	"exempt:a; role(a)=ip:1/s",
	"header(a:5/s",
	"ip:5/s; \xff",
	"key(account):5/d; ip:50/h; count:401",
	"ip:1/s; count:4xx,5xx",
	"ip:1/s; count:401,4xx",
	"ip:1/s; count:",
	"ip:10k/h,64Ki/d",
	"ip:9999999Ti/s",
	// Costs and grains.
	"user:10/min; user[bytes]:2Gi/d",
	"key(account)[bytes]:1Gi/d~1h; ip[5]:100/min",
	"user:200/10s,5000/h,20000/d~15m",
	" user [ 007 ] : 2Gi / d ~ 1 h ; role(a)=ip[bytes]:1Ti/30d~3h & global:5/s~100ms",
	"ip:1125899906842624/d~h",
	"ip:1125899906842625/d~h",
	"user[]:1/s",
	"user[0]:1/s",
	"user[1x]:1/s",
	"user[bytes:1/s",
	"ip[5]:3/min",
	"ip[99999999999999999999]:10/s",
	"ip[5]:1/s; ip[05]:5/min",
	"ip:1/d~d",
	"ip:1/d~7min",
	"ip:1/d~1s",
	"ip:1/s~0ms",
	"ip:1/s~500us",
	"ip:1/d~99999999999999999999d",
	"ip:2Gi/d",
	"20000/d~15m",
	// Limit functions.
	"key(tenant):$quota/min",
	"ip:5/s,$quota/min; user[bytes]:$bytes.day/d~1h; role(a)=ip:$a-b_c/h",
	" ip : $ q / 30 s",
	"ip:$/s",
	"ip:$1q/s",
	"ip:$q",
	"ip:$q$r/s",
	"ip:$q/s,$r/s",
	"ip[5]:$q/min",
	// Regions.
	"ip:5/s; regions:local",
	" regions : local ; user:3 concurrent; fail:local",
	"ip:5/s; regions:global",
	"ip:5/s; regions:local; regions:local",
	"ip:5/s; regions:",
	"ip:5/s; regions:eu",
	"ip:5/s; regions:local,eu",
}

func FuzzParse(f *testing.F) {
	for _, s := range fuzzSeeds {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		g, err := Parse(s)
		if err != nil {
			var e *Error
			if !errors.As(err, &e) {
				t.Fatalf("Parse(%q) error is %T, want *Error", s, err)
			}
			if e.Input != s || e.Offset < 0 || e.Offset > len(s) {
				t.Fatalf("Parse(%q): Input %q, Offset %d", s, e.Input, e.Offset)
			}
			if kindOf(err) != errSyntax && kindOf(err) != errInvalid {
				t.Fatalf("Parse(%q) error %v has no category", s, err)
			}
			if !strings.HasPrefix(err.Error(), "rules: ") {
				t.Fatalf("Parse(%q) error %q lacks prefix", s, err)
			}
		} else {
			if err := g.Validate(); err != nil {
				t.Fatalf("Parse(%q) accepted a group Validate rejects: %v", s, err)
			}
			text := g.String()
			g2, err := Parse(text)
			if err != nil {
				t.Fatalf("Parse(%q).String() = %q does not parse: %v", s, text, err)
			}
			if !reflect.DeepEqual(g, g2) {
				t.Fatalf("round trip of %q through %q:\n got %#v\nwant %#v", s, text, g2, g)
			}
			if text2 := g2.String(); text2 != text {
				t.Fatalf("String is not a fixpoint: %q then %q", text, text2)
			}
		}

		w, err := parseWindow(s)
		if err == nil {
			w2, err := parseWindow(w.String())
			if err != nil || w2 != w {
				t.Fatalf("parseWindow(%q) = %v; parseWindow(%q) = %v, %v", s, w, w.String(), w2, err)
			}
		}
	})
}
