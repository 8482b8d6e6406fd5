package lifecycle

import (
	"testing"

	"github.com/slidelimit/slidelimit/rules"
)

func TestCounts(t *testing.T) {
	t.Parallel()
	tests := []struct {
		group   string
		counted []int
		given   []int // statuses whose requests are given back
	}{
		{"ip:1/s", []int{100, 200, 401, 500, 599, 0, 999}, nil},
		{"ip:1/s; count:401", []int{401}, []int{200, 204, 400, 403, 411, 501, 0, 1401, -401}},
		{"ip:1/s; count:4xx", []int{400, 401, 429, 499}, []int{200, 399, 500, 0, 4000}},
		{"ip:1/s; count:4xx,5xx", []int{400, 404, 500, 599}, []int{100, 200, 302, 600}},
		{"ip:1/s; count:403,200", []int{200, 403}, []int{201, 401, 404}},
		{"ip:1/s; count:1xx", []int{100, 101, 199}, []int{200}},
	}
	for _, tt := range tests {
		t.Run(tt.group, func(t *testing.T) {
			t.Parallel()
			g := rules.MustParse(tt.group)
			for _, s := range tt.counted {
				if !Counts(g.Count, s) {
					t.Errorf("Counts(%d) = false, want true", s)
				}
			}
			for _, s := range tt.given {
				if Counts(g.Count, s) {
					t.Errorf("Counts(%d) = true, want false", s)
				}
			}
		})
	}
}
