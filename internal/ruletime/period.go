package ruletime

import (
	"strconv"
	"time"
)

// units are the units a period is written in, largest first, so the first
// one dividing a period gives the shortest text.
var units = [...]struct {
	d    time.Duration
	name string
}{
	{24 * time.Hour, "d"},
	{time.Hour, "h"},
	{time.Minute, "min"},
	{time.Second, "s"},
	{time.Millisecond, "ms"},
}

// FormatPeriod returns p as error messages and policy names show it: a
// count, always, and the largest unit of the rule language that divides p
// ("1s", "30d", "90min", "500ms"). A period the language cannot express
// (not positive, or not whole milliseconds) is written as
// time.Duration.String writes it.
func FormatPeriod(p time.Duration) string {
	n, unit, ok := SplitPeriod(p)
	if !ok {
		return p.String()
	}
	return strconv.FormatInt(n, 10) + unit
}

// SplitPeriod returns p as a count of the largest unit of the rule
// language that divides it, or false when p is not a positive whole number
// of milliseconds.
func SplitPeriod(p time.Duration) (n int64, unit string, ok bool) {
	if p <= 0 || p%time.Millisecond != 0 {
		return 0, "", false
	}
	for _, u := range units {
		if p%u.d == 0 {
			return int64(p / u.d), u.name, true
		}
	}
	return 0, "", false // unreachable: the last unit divides every p here
}
