package testutil

import "github.com/slidelimit/slidelimit/middleware"

// ConfigError returns the first *middleware.ConfigError in err's tree of
// kind and option ("" matches any option), or nil: a test's way to tell
// which configuration mistake an error reports, where errors.As would stop
// at the first ConfigError of a joined list.
func ConfigError(err error, kind, option string) *middleware.ConfigError {
	switch e := err.(type) {
	case nil:
		return nil
	case *middleware.ConfigError:
		if e.Kind == kind && (option == "" || e.Option == option) {
			return e
		}
		return ConfigError(e.Err, kind, option)
	case interface{ Unwrap() []error }:
		for _, u := range e.Unwrap() {
			if ce := ConfigError(u, kind, option); ce != nil {
				return ce
			}
		}
		return nil
	case interface{ Unwrap() error }:
		return ConfigError(e.Unwrap(), kind, option)
	}
	return nil
}
