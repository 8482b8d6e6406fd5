package lua

import (
	"context"
	"strconv"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/slidelimit/slidelimit/internal/redistest"
)

// readScore stores v as a score, reads it back the way the scripts do
// (tonumber(s) or sci(s)) and returns what the script read, as a decimal
// string so that a nil is visible.
const readScore = `
local s = redis.call('ZSCORE', KEYS[1], 'm')
local v = tonumber(s) or sci(s)
if v == nil then
  return 'nil:' .. s
end
return string.format('%d', v)
`

func readBack(t testing.TB, c redis.Cmdable, key string, v int64) string {
	t.Helper()
	ctx := context.Background()
	if err := c.ZAdd(ctx, key, redis.Z{Score: float64(v), Member: "m"}).Err(); err != nil {
		t.Fatal(err)
	}
	got, err := c.Eval(ctx, number+readScore, []string{key}).Text()
	if err != nil {
		t.Fatalf("%d: %v", v, err)
	}
	return got
}

// scoreCases are scores whose shortest form is an exponent (miniredis
// prints 2e+15, -3e+08), the markers' magnitudes, and plain ones.
var scoreCases = []int64{
	0, 1, -1, 7, 100, 2_000_000_000_000_000, -300_000_000, 600_000_000, -1_200_000_000,
	60_000_000, 100_000_000, 1_000_000_000, -6_000_000_000, 3_000_000_000_000, 1<<53 - 1,
	-(1<<51 + 20_000_000), 1_764_000_000_123_456, 1_700_000_000_000_000, -2_251_799_813_685_248,
	10, 120, 1_000_000_000_000_000, 9_000_000_000_000_000,
}

// TestSciReadsScores checks that the scripts read every integer score back
// exactly, on miniredis (which prints exponents) and on real Redis.
func TestSciReadsScores(t *testing.T) {
	t.Parallel()
	_, mc := redistest.Mini(t)
	rc := redistest.Start(t).Client()
	for name, c := range map[string]redis.Cmdable{"miniredis": mc, "redis": rc} {
		for _, v := range scoreCases {
			if got, want := readBack(t, c, "k", v), strconv.FormatInt(v, 10); got != want {
				t.Errorf("%s: score %d read as %s", name, v, got)
			}
		}
	}
}

// TestSciForms checks sci on the forms a Redis may print.
func TestSciForms(t *testing.T) {
	t.Parallel()
	_, c := redistest.Mini(t)
	for _, tc := range []struct{ in, want string }{
		{"2e+15", "2000000000000000"},
		{"-3e+08", "-300000000"},
		{"6E8", "600000000"},
		{"1.25e+02", "125"},
		{"-1.764000000123456e+15", "-1764000000123456"},
		{"12", "12"},
		{"5e-01", "0"}, // 0.5: %d truncates; no score here is fractional
		{"abc", "nil"},
		{"", "nil"},
	} {
		got, err := c.Eval(context.Background(), number+`
local v = tonumber(ARGV[1]) or sci(ARGV[1])
if v == nil then return 'nil' end
return string.format('%d', v)`, nil, tc.in).Text()
		if err != nil || got != tc.want {
			t.Errorf("sci(%q) = %q, %v; want %q", tc.in, got, err, tc.want)
		}
	}
}

// FuzzSciReadsScores stores random integer scores below 2^53 in miniredis
// and checks that the scripts read them back exactly.
func FuzzSciReadsScores(f *testing.F) {
	for _, v := range scoreCases {
		f.Add(v)
	}
	_, c := redistest.Mini(f)
	f.Fuzz(func(t *testing.T, v int64) {
		v %= 1 << 53 // scores are integers below 2^53 in magnitude
		if got, want := readBack(t, c, "k", v), strconv.FormatInt(v, 10); got != want {
			t.Fatalf("score %d read as %s", v, got)
		}
	})
}
