package rules

import (
	"reflect"
	"testing"
	"time"
)

func TestConcurrentParse(t *testing.T) {
	t.Parallel()
	conc := func(n int64) Window { return Window{Limit: n, Concurrent: true} }
	tests := []struct {
		in, canon string
		rules     []Rule
	}{
		{"user:3 concurrent", "user:3 concurrent", []Rule{{Kind: User, Windows: []Window{conc(3)}}}},
		{"user:10/min,3 concurrent", "user:10/min,3 concurrent",
			[]Rule{{Kind: User, Windows: []Window{win(10, time.Minute), conc(3)}}}},
		{"user : 3concurrent , 1/s", "user:3 concurrent,1/s",
			[]Rule{{Kind: User, Windows: []Window{conc(3), win(1, time.Second)}}}},
		{"ip:1k concurrent", "ip:1000 concurrent", []Rule{{Kind: IP, Windows: []Window{conc(1000)}}}},
		{"user:1 concurrent; user:20/h", "user:1 concurrent; user:20/h",
			[]Rule{{Kind: User, Windows: []Window{conc(1)}}, {Kind: User, Windows: []Window{win(20, time.Hour)}}}},
		{"user:1 concurrent; user[bytes]:2Gi/d", "user:1 concurrent; user[bytes]:2147483648/d",
			[]Rule{{Kind: User, Windows: []Window{conc(1)}}, {Kind: User, Cost: "bytes", Windows: []Window{win(2<<30, 24*time.Hour)}}}},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			t.Parallel()
			g, err := Parse(tt.in)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(g.Rules, tt.rules) {
				t.Errorf("rules = %+v, want %+v", g.Rules, tt.rules)
			}
			if got := g.String(); got != tt.canon {
				t.Errorf("String() = %q, want %q", got, tt.canon)
			}
			again, err := Parse(g.String())
			if err != nil || !reflect.DeepEqual(again, g) {
				t.Errorf("Parse(String()) = %+v, %v; want %+v", again, err, g)
			}
		})
	}
}

func TestConcurrentInvalid(t *testing.T) {
	t.Parallel()
	tests := []struct{ in, want string }{
		{"user:0 concurrent", `rules: "user:0 concurrent": limit 0 is below 1 at offset 5`},
		{"user:3 concurrent,2 concurrent", `rules: "user:3 concurrent,2 concurrent": a second in-flight window in rule user; a rule has at most one N concurrent at offset 18`},
		{"user[bytes]:10/min,3 concurrent", `rules: "user[bytes]:10/min,3 concurrent": rule user[bytes] counts units of cost, not requests, so it takes no in-flight window; put N concurrent in a rule without a cost at offset 19`},
		{"ip[5]:3 concurrent", `rules: "ip[5]:3 concurrent": rule ip[5] counts units of cost, not requests, so it takes no in-flight window; put N concurrent in a rule without a cost at offset 6`},
		{"user:3 concurrent~1s", `rules: "user:3 concurrent~1s": an in-flight window (N concurrent) takes no grain at offset 17`},
		{"user:3 concurrent/s", `rules: "user:3 concurrent/s": an in-flight window (N concurrent) has no period at offset 17`},
		{"user:100001 concurrent", `rules: "user:100001 concurrent": limit 100001 is above 100000, the most slots an in-flight window may hold at offset 5`},
		{"user:99999999999999999999 concurrent", `rules: "user:99999999999999999999 concurrent": limit 99999999999999999999 is above 100000, the most slots an in-flight window may hold at offset 5`},
		{"user:1 concurrent; user:2 concurrent", `rules: "user:1 concurrent; user:2 concurrent": duplicate rule user; put all its windows in one rule at offset 19`},
		{"user:1 concurrent; user:2/s,1 concurrent", `rules: "user:1 concurrent; user:2/s,1 concurrent": duplicate rule user; put all its windows in one rule at offset 19`},
		{"user:1/s; user:2/s,1 concurrent", `rules: "user:1/s; user:2/s,1 concurrent": duplicate rule user; put all its windows in one rule at offset 10`},
		{"user:3 concurren", `rules: "user:3 concurren": expected "/" after the limit, found "c" at offset 7`},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			t.Parallel()
			_, err := Parse(tt.in)
			if err == nil || err.Error() != tt.want {
				t.Fatalf("Parse error = %v, want %s", err, tt.want)
			}
			if _, w := parseWindow(tt.in[5:]); w == nil && tt.in[:5] == "user:" && tt.in != "user:3 concurrent,2 concurrent" {
				t.Errorf("parseWindow(%q) accepted", tt.in[5:])
			}
		})
	}
}

// TestConcurrentValidate checks groups built in Go: an in-flight window
// with a period or a grain, and a rate window without a period, are
// rejected where they are printed.
func TestConcurrentValidate(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		w    Window
		want string
	}{
		{"period", Window{Limit: 3, Concurrent: true, Period: time.Second}, `rules: "user:3 concurrent": an in-flight window (N concurrent) has no period, found 1s at offset 7`},
		{"grain", Window{Limit: 3, Concurrent: true, Grain: time.Second}, `rules: "user:3 concurrent": an in-flight window (N concurrent) takes no grain, found 1s at offset 7`},
		{"no period", Window{Limit: 3}, `rules: "user:3/0s": period 0s is below 1ms at offset 7`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			err := Group{Rules: []Rule{{Kind: User, Windows: []Window{tt.w}}}}.Validate()
			if err == nil || err.Error() != tt.want || kindOf(err) != errInvalid {
				t.Fatalf("Validate() = %v, want %s", err, tt.want)
			}
		})
	}
	if _, err := parseWindow("2 concurrent"); err != nil {
		t.Errorf("parseWindow(2 concurrent) = %v", err)
	}
}
