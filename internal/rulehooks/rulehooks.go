// Package rulehooks is the one back door into package rules: the parts of
// its parser that package role, internal/lifecycle and the root need, and
// that rules does not export. Package rules sets the hooks in its init.
// This package cannot name rules' types (rules imports it), so groups and
// limiters pass as any: a rules.Group, a rules.Limiter, and a *rules.Error
// as error.
package rulehooks

// The hooks, set by package rules' init.
var (
	// CheckRoles is role.Policy.Check's: group is a rules.Group.
	CheckRoles func(group any, declared []string) error
	// Relocate is lifecycle.Relocate; err is a *rules.Error.
	Relocate func(err error, text string) error
	// ParseDialect is lifecycle.Dialect.Parse; limiter receives a
	// rules.Limiter, and the group returned is a rules.Group.
	ParseDialect func(s string, limiter func(any) error, countItem func(string) (string, error)) (any, error)
)
