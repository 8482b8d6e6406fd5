// Package access lets the module's packages read what package middleware
// keeps unexported: it sets these functions when it is initialized.
package access

import "github.com/slidelimit/slidelimit/rules"

// MiddlewareParts returns what a []middleware.Option configures that a
// root package throttle uses: the hooks ([]func(middleware.Event)) and
// the limit functions (map[string]func(*http.Request) (int64, error)).
var MiddlewareParts func(opts any) (hooks, limits any)

// MiddlewareSubject returns the subject under which a middleware built
// with opts (a []middleware.Option) counts value in the windows of a
// limiter of kind; it fails with an error matching lifecycle.ErrSubject
// for a value the middleware never counts under kind.
var MiddlewareSubject func(kind rules.Kind, value string, opts any) (string, error)
