// Package rulespec holds the bounds and helpers of the rule language that
// package rules and its sibling packages (engine, middleware, the root)
// share: the limits a rule group obeys, calendar periods and zones, the
// period writer and the ServeMux pattern check. It imports nothing of this
// module, so that rules can import it; the helpers typed over rules' types
// live in internal/rulesx.
package rulespec
