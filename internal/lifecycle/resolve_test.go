package lifecycle_test

import (
	"strings"
	"testing"
	"time"

	"github.com/slidelimit/slidelimit/internal/lifecycle"
	"github.com/slidelimit/slidelimit/internal/rulelimits"
	"github.com/slidelimit/slidelimit/rules"
)

func TestResolve(t *testing.T) {
	t.Parallel()
	dyn := rules.Window{Period: time.Minute, LimitFunc: "quota"}
	grained := rules.Window{Period: time.Hour, Grain: time.Minute, LimitFunc: "quota"}
	tests := []struct {
		name string
		l    rules.Rule
		w    rules.Window
		n    int64
		err  string // a substring; "" for success
	}{
		{"exact", rules.Rule{Kind: rules.Key, Name: "t"}, dyn, 7500, ""},
		{"exact at cap", rules.Rule{Kind: rules.Key, Name: "t"}, dyn, rulelimits.MaxLimit, ""},
		{"exact above cap", rules.Rule{Kind: rules.Key, Name: "t"}, dyn, rulelimits.MaxLimit + 1, "limit 100001 is above 100000"},
		{"grained above exact cap", rules.Rule{Kind: rules.Key, Name: "t"}, grained, rulelimits.MaxLimit + 1, ""},
		{"costed", rules.Rule{Kind: rules.User, Cost: "bytes"}, dyn, rulelimits.MaxBoundedLimit, ""},
		{"costed above cap", rules.Rule{Kind: rules.User, Cost: "bytes"}, dyn, rulelimits.MaxBoundedLimit + 1, "(2^50)"},
		{"zero", rules.Rule{Kind: rules.IP}, dyn, 0, "limit 0 of window $quota/min is below 1"},
		{"negative", rules.Rule{Kind: rules.IP}, dyn, -3, "is below 1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := lifecycle.Resolve(tt.l, tt.w, tt.n)
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
