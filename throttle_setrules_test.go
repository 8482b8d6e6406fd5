package slidelimit_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/slidelimit/slidelimit"
)

// TestThrottleSetRulesUndeclared: SetRules on a throttle refuses a key or
// a named cost its callers were not declared with (every call would fail)
// with a *ConfigError, and nothing changes; names the code declared, and
// constant costs, are accepted.
func TestThrottleSetRulesUndeclared(t *testing.T) {
	lim := throttleLimiter(t, miniClient(t), randomPrefix(t))
	ctx := context.Background()
	plain, err := lim.Throttle("plain", "global:100/s")
	if err != nil {
		t.Fatal(err)
	}
	llm, err := lim.Throttle("llm", "key(apikey):100/s; key(apikey)[tokens]:9000/min")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ scope, rules, want string }{
		{"plain", "key(apikey):100/s", `key "apikey"`},
		{"plain", "global[tokens]:100/s", `cost "tokens"`},
		{"llm", "key(apikey):100/s; key(model):10/s", `key "model"`},
		{"llm", "key(apikey)[bytes]:9000/min", `cost "bytes"`},
	} {
		err := lim.SetRules(ctx, tc.scope, tc.rules)
		var ce *slidelimit.ConfigError
		if !errors.As(err, &ce) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("SetRules(%q, %q) = %v, want a *ConfigError naming %s", tc.scope, tc.rules, err, tc.want)
		}
	}
	if _, in, err := lim.RuleOverrides(ctx); err != nil || len(in) != 0 {
		t.Errorf("overrides in force after refusals: %v, %v; want none", in, err)
	}
	if r := plain.Stats().Rules; r != "global:100/s" {
		t.Errorf("plain enforces %q", r)
	}
	p, err := plain.Wait(ctx, slidelimit.Call{})
	if err != nil {
		t.Fatalf("a caller of plain after the refusals: %v", err)
	}
	p.Finish(nil)

	for _, tc := range []struct{ scope, rules string }{
		{"plain", "global:50/s; global[3]:200/s"},
		{"llm", "key(apikey)[tokens]:5000/min; global:20/s"},
	} {
		if err := lim.SetRules(ctx, tc.scope, tc.rules); err != nil {
			t.Errorf("SetRules(%q, %q) = %v, want it accepted", tc.scope, tc.rules, err)
		}
	}
	p, err = llm.Wait(ctx, slidelimit.Call{Keys: map[string]string{"apikey": "k"}, Costs: map[string]int64{"tokens": 10}})
	if err != nil {
		t.Fatalf("a caller of llm under the accepted override: %v", err)
	}
	p.Finish(nil)
}
