package rules

// A count: statement lists the response statuses whose requests stay
// counted. Its items are codes ("401") or classes ("4xx"); validStatus says
// which texts are items, Counts applies them.

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

// Counts reports whether an admitted request whose response has the given
// status stays counted: always when g has no count: statement, otherwise
// when the status is listed by code or by class. A status outside 100..599
// matches no item.
func (g Group) Counts(status int) bool {
	if len(g.Count) == 0 {
		return true
	}
	if status < 100 || status > 599 {
		return false
	}
	code := [3]byte{byte('0' + status/100), byte('0' + status/10%10), byte('0' + status%10)}
	for _, c := range g.Count {
		if len(c) == 3 && c[0] == code[0] && (c[1] == 'x' || c[1] == code[1] && c[2] == code[2]) {
			return true
		}
	}
	return false
}
