// Package echolimit rate-limits echo routes with slidelimit.
//
// The windows' scope is the request's method and echo route template
// ("GET /files/:id"), so every path of a route shares its windows; echo's
// path parameters are copied into http.Request.SetPathValue, so param(name)
// rules count them; a denied request (429, 503 or 500) is answered by
// slidelimit and the rest of the chain never runs.
package echolimit

import (
	"net/http"

	"github.com/labstack/echo/v4"

	"github.com/slidelimit/slidelimit"
	"github.com/slidelimit/slidelimit/contrib/internal/adapt"
	"github.com/slidelimit/slidelimit/middleware"
)

// New returns echo middleware enforcing the rule group rulesText with lim.
// opts are added to lim's middleware options (a WithScope or WithScopeFunc
// there, or a scope: statement, replaces the route scope). It fails as
// slidelimit.Limiter.Middleware does. The middleware is safe for concurrent
// use.
func New(lim *slidelimit.Limiter, rulesText string, opts ...middleware.Option) (echo.MiddlewareFunc, error) {
	mw, err := adapt.Middleware(lim, rulesText, opts)
	if err != nil {
		return nil, err
	}
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			r := c.Request()
			names, values := c.ParamNames(), c.ParamValues()
			for i := range min(len(names), len(values)) {
				r.SetPathValue(names[i], values[i])
			}
			res := c.Response()
			orig := &recorder{ResponseWriter: res.Writer}
			var err error
			passed := adapt.Serve(mw, orig, adapt.WithScope(r, c.Path()), func(w http.ResponseWriter, r *http.Request) {
				c.SetRequest(r)
				// echo's Response writes through w, which records the
				// status for count: and forwards to the original writer.
				res.Writer = w
				defer func() { res.Writer = orig.ResponseWriter }()
				err = next(c)
			})
			if !passed {
				// slidelimit answered; tell echo's Response, so that its
				// logger and error handler see the status.
				res.Status, res.Committed = orig.status, true
			}
			return err
		}
	}, nil
}

// recorder notes the status slidelimit answers a denied request with.
type recorder struct {
	http.ResponseWriter
	status int
}

func (r *recorder) WriteHeader(code int) {
	if r.status == 0 {
		r.status = code
	}
	r.ResponseWriter.WriteHeader(code)
}

// Unwrap returns the wrapped writer, for http.ResponseController.
func (r *recorder) Unwrap() http.ResponseWriter { return r.ResponseWriter }
