// Package access lets the module's packages read what package middleware
// keeps unexported: it sets these functions when it is initialized.
package access

// MiddlewareParts returns what a []middleware.Option configures that a
// root package throttle uses: the hooks ([]func(middleware.Event)) and
// the limit functions (map[string]func(*http.Request) (int64, error)).
var MiddlewareParts func(opts any) (hooks, limits any)
