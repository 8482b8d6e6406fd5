package rules

import (
	"slices"
	"testing"
	"time"
)

func TestLimitFuncParse(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in, canonical string
		want          []Window // of the first rule
	}{
		{"key(tenant):$quota/min", "key(tenant):$quota/min", []Window{{Period: time.Minute, LimitFunc: "quota"}}},
		{" ip : 5 / s , $q.x-1 / 30 s ~ 3s", "ip:5/s,$q.x-1/30s~3s",
			[]Window{{Limit: 5, Period: time.Second}, {Period: 30 * time.Second, Grain: 3 * time.Second, LimitFunc: "q.x-1"}}},
		{"user[bytes]:$bytes/d", "user[bytes]:$bytes/d", []Window{{Period: 24 * time.Hour, LimitFunc: "bytes"}}},
		{"ip[5]:$q/min; role(a)=ip:$q/h", "ip[5]:$q/min; role(a)=ip:$q/h", []Window{{Period: time.Minute, LimitFunc: "q"}}},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			t.Parallel()
			g, err := Parse(tt.in)
			if err != nil {
				t.Fatal(err)
			}
			if got := g.String(); got != tt.canonical {
				t.Errorf("String() = %q, want %q", got, tt.canonical)
			}
			if got := g.Rules[0].Windows; !equalWindows(got, tt.want) {
				t.Errorf("windows = %+v, want %+v", got, tt.want)
			}
			if !slices.ContainsFunc(g.Rules[0].Windows, func(w Window) bool { return w.LimitFunc != "" }) {
				t.Error("no window has a limit function")
			}
			if err := g.Validate(); err != nil {
				t.Errorf("Validate: %v", err)
			}
		})
	}
}

func equalWindows(a, b []Window) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestLimitFuncErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in   string
		cat  error
		want string
	}{
		{"ip:$/s", errSyntax, `rules: "ip:$/s": expected a limit function name after "$", found "/" at offset 4`},
		{"ip:$ /s", errSyntax, `rules: "ip:$ /s": expected a limit function name after "$", found " " at offset 4`},
		{"ip:$q", errSyntax, `rules: "ip:$q": expected "/" after the limit, found end of input at offset 5`},
		{"ip:5/s,$1q/min", errInvalid, `rules: "ip:5/s,$1q/min": invalid limit function name "1q"; want a letter, then letters, digits, "_", "-" or "." at offset 7`},
		{"ip:$q$r/s", errInvalid, `rules: "ip:$q$r/s": invalid limit function name "q$r"; want a letter, then letters, digits, "_", "-" or "." at offset 3`},
		{"ip:$q/s,$r/1s", errInvalid, `rules: "ip:$q/s,$r/1s": duplicate period 1s in rule ip at offset 8`},
		{"ip:$q/s~2s", errInvalid, `rules: "ip:$q/s~2s": grain 2s is not shorter than the period 1s at offset 8`},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			t.Parallel()
			_, err := Parse(tt.in)
			if err == nil || err.Error() != tt.want || kindOf(err) != tt.cat {
				t.Errorf("Parse error = %v, want %s (%v)", err, tt.want, tt.cat)
			}
		})
	}
}

func TestLimitFuncValidate(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name string
		w    Window
		want string
	}{
		{"both", Window{Limit: 5, Period: time.Second, LimitFunc: "q"}, `rules: "ip:$q/s": window has both limit 5 and limit function $q; want one at offset 3`},
		{"neither", Window{Period: time.Second}, `rules: "ip:0/s": limit 0 is below 1 at offset 3`},
		{"bad name", Window{Period: time.Second, LimitFunc: "a b"}, `rules: "ip:$a b/s": invalid limit function name "a b"; want a letter, then letters, digits, "_", "-" or "." at offset 3`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			g := Group{Rules: []Rule{{Kind: IP, Windows: []Window{tt.w}}}}
			if err := g.Validate(); err == nil || err.Error() != tt.want {
				t.Errorf("Validate = %v, want %s", err, tt.want)
			}
		})
	}
}
