package rules

// A count: statement lists the response statuses whose requests stay
// counted. Its items are codes ("401") or classes ("4xx"); validStatus says
// which texts are items, internal/lifecycle.Counts applies them.

// validStatus reports whether s is a count item: a status code from 100 to
// 599, or a class 1xx to 5xx.
func validStatus(s string) bool {
	if len(s) != 3 || s[0] < '1' || s[0] > '5' {
		return false
	}
	if s[1] == 'x' && s[2] == 'x' {
		return true
	}
	return isDigit(s[1]) && isDigit(s[2])
}

// statusClass returns the class item ("4xx") that covers the code item s.
func statusClass(s string) string { return s[:1] + "xx" }
