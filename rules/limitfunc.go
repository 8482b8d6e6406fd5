package rules

import "fmt"

// Dynamic reports whether the window's limit comes from a limit function
// ($name in rule text) rather than from the text.
func (w Window) Dynamic() bool { return w.LimitFunc != "" }

// Dynamic reports whether some window of the limiter has a limit function.
func (l Limiter) Dynamic() bool {
	for _, w := range l.Windows {
		if w.LimitFunc != "" {
			return true
		}
	}
	return false
}

// LimitCap returns the largest limit window w of l may have: MaxLimit for
// an exact sliding window of a limiter without a cost, MaxBoundedLimit
// otherwise (a calendar window is one counter whatever its limit)
// (see the package documentation's Rules). Validation holds written limits
// to it, and Resolve the values of limit functions.
func (l Limiter) LimitCap(w Window) int64 {
	if l.Cost == "" && w.Grain == 0 && w.Calendar == "" {
		return MaxLimit
	}
	return MaxBoundedLimit
}

// Resolve returns window w of l with limit n, the value its limit function
// returned for one request. It keeps LimitFunc, so the result still names
// its function (and prints as $name), and fails when n is below 1 or above
// l.LimitCap(w): a limit function is held to the rules a written limit
// obeys.
func (l Limiter) Resolve(w Window, n int64) (Window, error) {
	if n < 1 {
		return Window{}, fmt.Errorf("rules: limit %d of window %s is below 1", n, w)
	}
	if n > l.LimitCap(w) {
		return Window{}, fmt.Errorf("rules: window %s of limiter %s: %s", w, l.ID(), limitAbove(fmt.Sprint(n), l.LimitCap(w) == MaxLimit))
	}
	w.Limit = n
	return w, nil
}
