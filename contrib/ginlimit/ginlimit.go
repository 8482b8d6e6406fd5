// Package ginlimit rate-limits gin routes with slidelimit.
//
// The windows' scope is the request's method and gin route template
// ("GET /files/:id"), so every path of a route shares its windows; gin's
// path parameters are copied into http.Request.SetPathValue, so param(name)
// rules count them; a denied request (429, 503 or 500) aborts gin's
// chain, so later middleware and the handler never run.
package ginlimit

import (
	"net/http"

	"github.com/gin-gonic/gin"

	"github.com/slidelimit/slidelimit"
	"github.com/slidelimit/slidelimit/contrib/internal/adapt"
	"github.com/slidelimit/slidelimit/middleware"
)

// New returns gin middleware enforcing the rule group rulesText with lim.
// opts are added to lim's middleware options (a WithScope or WithScopeFunc
// there, or a scope: statement, replaces the route scope). It fails as
// slidelimit.Limiter.Middleware does. The handler is safe for concurrent
// use.
func New(lim *slidelimit.Limiter, rulesText string, opts ...middleware.Option) (gin.HandlerFunc, error) {
	mw, err := adapt.Middleware(lim, rulesText, opts)
	if err != nil {
		return nil, err
	}
	return func(c *gin.Context) {
		for _, p := range c.Params {
			c.Request.SetPathValue(p.Key, p.Value)
		}
		orig := c.Writer
		passed := adapt.Serve(mw, orig, adapt.WithScope(c.Request, c.FullPath()), func(w http.ResponseWriter, r *http.Request) {
			c.Request = r
			if w != http.ResponseWriter(orig) {
				// count: records the status through w: gin's handlers
				// must write through it too.
				c.Writer = &writer{ResponseWriter: orig, w: w}
				defer func() { c.Writer = orig }()
			}
			c.Next()
		})
		if !passed {
			c.Abort()
		}
	}, nil
}

// writer is gin's ResponseWriter with its writes sent through w, which
// records the status and forwards them to the original writer.
type writer struct {
	gin.ResponseWriter
	w http.ResponseWriter
}

func (w *writer) WriteHeader(code int)              { w.w.WriteHeader(code) }
func (w *writer) Write(b []byte) (int, error)       { return w.w.Write(b) }
func (w *writer) WriteString(s string) (int, error) { return w.w.Write([]byte(s)) }
