package rules

import (
	"errors"
	"strings"
	"testing"
	"time"
)

func TestLimitFuncParse(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in, canonical string
		want          []Window // of the first limiter
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
			if got := g.Limiters[0].Windows; !equalWindows(got, tt.want) {
				t.Errorf("windows = %+v, want %+v", got, tt.want)
			}
			if !g.Limiters[0].Dynamic() {
				t.Error("Dynamic() = false")
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
		{"ip:$/s", ErrSyntax, `rules: "ip:$/s": expected a limit function name after "$", found "/" at offset 4`},
		{"ip:$ /s", ErrSyntax, `rules: "ip:$ /s": expected a limit function name after "$", found " " at offset 4`},
		{"ip:$q", ErrSyntax, `rules: "ip:$q": expected "/" after the limit, found end of input at offset 5`},
		{"ip:5/s,$1q/min", ErrInvalid, `rules: "ip:5/s,$1q/min": invalid limit function name "1q"; want a letter, then letters, digits, "_", "-" or "." at offset 7`},
		{"ip:$q$r/s", ErrInvalid, `rules: "ip:$q$r/s": invalid limit function name "q$r"; want a letter, then letters, digits, "_", "-" or "." at offset 3`},
		{"ip:$q/s,$r/1s", ErrInvalid, `rules: "ip:$q/s,$r/1s": duplicate period 1s in limiter ip at offset 8`},
		{"ip:$q/s~2s", ErrInvalid, `rules: "ip:$q/s~2s": grain 2s is not shorter than the period 1s at offset 8`},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			t.Parallel()
			_, err := Parse(tt.in)
			if err == nil || err.Error() != tt.want || !errors.Is(err, tt.cat) {
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
			g := Group{Limiters: []Limiter{{Kind: IP, Windows: []Window{tt.w}}}}
			if err := g.Validate(); err == nil || err.Error() != tt.want {
				t.Errorf("Validate = %v, want %s", err, tt.want)
			}
		})
	}
}

func TestLimiterResolve(t *testing.T) {
	t.Parallel()
	dyn := Window{Period: time.Minute, LimitFunc: "quota"}
	grained := Window{Period: time.Hour, Grain: time.Minute, LimitFunc: "quota"}
	tests := []struct {
		name string
		l    Limiter
		w    Window
		n    int64
		err  string // a substring; "" for success
	}{
		{"exact", Limiter{Kind: Key, Name: "t"}, dyn, 7500, ""},
		{"exact at cap", Limiter{Kind: Key, Name: "t"}, dyn, MaxLimit, ""},
		{"exact above cap", Limiter{Kind: Key, Name: "t"}, dyn, MaxLimit + 1, "limit 100001 is above 100000"},
		{"grained above exact cap", Limiter{Kind: Key, Name: "t"}, grained, MaxLimit + 1, ""},
		{"costed", Limiter{Kind: User, Cost: "bytes"}, dyn, MaxBoundedLimit, ""},
		{"costed above cap", Limiter{Kind: User, Cost: "bytes"}, dyn, MaxBoundedLimit + 1, "(2^50)"},
		{"zero", Limiter{Kind: IP}, dyn, 0, "limit 0 of window $quota/min is below 1"},
		{"negative", Limiter{Kind: IP}, dyn, -3, "is below 1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := tt.l.Resolve(tt.w, tt.n)
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("Resolve = %v, %v; want an error with %q", got, err, tt.err)
				}
				return
			}
			if err != nil || got.Limit != tt.n || got.LimitFunc != tt.w.LimitFunc || got.Period != tt.w.Period {
				t.Fatalf("Resolve = %+v, %v", got, err)
			}
		})
	}
}
