package slidelimit_test

import (
	"errors"

	"github.com/slidelimit/slidelimit/rules"
)

// Stand-ins, in test tables, for the two kinds of *rules.Error
// (rules.Error.Syntax).
var (
	errRuleSyntax  = errors.New("a *rules.Error of syntax")
	errRuleInvalid = errors.New("a *rules.Error of an invalid rule")
)

// hasRuleError reports whether err's tree holds a *rules.Error whose
// Syntax is syntax.
func hasRuleError(err error, syntax bool) bool {
	switch e := err.(type) {
	case *rules.Error:
		return e.Syntax == syntax
	case interface{ Unwrap() []error }:
		for _, x := range e.Unwrap() {
			if hasRuleError(x, syntax) {
				return true
			}
		}
	case interface{ Unwrap() error }:
		return hasRuleError(e.Unwrap(), syntax)
	}
	return false
}
