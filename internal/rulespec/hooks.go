package rulespec

// Hooks into package rules, set by its init for internal/rulesx, which
// wraps them in rules' types. They need the parser's offsets, which rules
// does not export, and this package cannot name rules' types (rules
// imports it), so groups and limiters pass as any: a rules.Group, a
// rules.Limiter, and a *rules.Error as error.
var (
	// CheckRoles is rulesx.CheckRoles; group is a rules.Group.
	CheckRoles func(group any, declared []string) error
	// Relocate is rulesx.Relocate; err is a *rules.Error.
	Relocate func(err error, text string) error
	// ParseDialect is rulesx.Dialect.Parse; limiter receives a
	// rules.Limiter, and the group returned is a rules.Group.
	ParseDialect func(s string, limiter func(any) error, countItem func(string) (string, error)) (any, error)
)
