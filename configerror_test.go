package slidelimit_test

import (
	"errors"

	"github.com/slidelimit/slidelimit/internal/testutil"
)

// unregistered stands, where a test wants an error, for a
// *middleware.ConfigError reporting a function that the option it names
// did not register (see isError).
type unregistered string

func (u unregistered) Error() string { return "unregistered function of " + string(u) }

// isError reports whether err matches want: errors.Is; for a kindErr, a
// *slidelimit.ConfigError of its kind; for an
// unregistered, a *middleware.ConfigError of that kind and option; for
// errRuleSyntax and errRuleInvalid, a *rules.Error of that kind anywhere
// in err's tree.
func isError(err, want error) bool {
	if k, ok := want.(kindErr); ok {
		return isKind(err, string(k))
	}
	if u, ok := want.(unregistered); ok {
		return testutil.ConfigError(err, "unregistered", string(u)) != nil
	}
	if want != errRuleSyntax && want != errRuleInvalid {
		return errors.Is(err, want)
	}
	return hasRuleError(err, want == errRuleSyntax)
}
