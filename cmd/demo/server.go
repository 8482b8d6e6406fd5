package main

import (
	"log/slog"
	"net/http"

	"github.com/slidelimit/slidelimit"
	"github.com/slidelimit/slidelimit/middleware"
	"github.com/slidelimit/slidelimit/role"
	"github.com/slidelimit/slidelimit/rules"
)

// demo is the demo service: its handler tree and the Limiter behind it.
type demo struct {
	handler http.Handler
	lim     *slidelimit.Limiter
	routes  []rules.Route
}

// newServer builds the demo's handler tree on b: the tagged api registered
// through a Limiter on a ServeMux, behind authenticate so that the Limiter
// sees who calls. extra options come last (tests lengthen the timeout).
// Close the Limiter when done; b stays open.
func newServer(b *backend, logger *slog.Logger, extra ...slidelimit.Option) (*demo, error) {
	opts := append([]slidelimit.Option{
		slidelimit.WithLogger(logger),
		slidelimit.WithKeyFunc("account", loginAccount),
		slidelimit.WithCostFunc("bytes", objectSize),
		// The admin account is shared by several people: count its user
		// rules (POST /pictures) by IP, as its routes' role rules do. The
		// root package has no option for that, so the policy, which also
		// declares the roles (a misspelt one in a tag is an error at
		// start-up), goes to the middleware.
		slidelimit.WithMiddlewareOptions(middleware.WithPolicy(role.Policy{
			ByIP:  []role.Role{roleAdmin},
			Roles: []role.Role{roleUser, roleAdmin, roleSuperadmin},
		})),
	}, extra...)
	lim, err := slidelimit.New(b.client, opts...)
	if err != nil {
		return nil, err
	}
	h := newAPI(lim, logger)
	routes, err := rules.Routes(h)
	if err != nil {
		lim.Close()
		return nil, err
	}
	mux := http.NewServeMux()
	if err := lim.Register(mux, h); err != nil {
		lim.Close()
		return nil, err
	}
	// Streamed downloads settle their byte quota to what was sent, so
	// their middleware has an option of its own.
	stream, err := lim.Middleware(streamRoute.Group.String(),
		middleware.WithSettle("bytes", middleware.Settlement{Written: true}))
	if err != nil {
		lim.Close()
		return nil, err
	}
	mux.Handle(streamRoute.Pattern, stream(http.HandlerFunc(streamObject)))
	routes = append(routes, streamRoute)
	// The operator's page and API: who is limited, fleet-wide. A browser
	// opens it with a super-admin's name and password.
	mux.Handle("/admin/ui/", askLogin(http.StripPrefix("/admin/ui", lim.AdminHandler(roleSuperadmin))))
	return &demo{handler: authenticate(mux), lim: lim, routes: routes}, nil
}

// logRoutes logs every route with its rules, as the Limiter enforces them.
func (d *demo) logRoutes(logger *slog.Logger) {
	for _, r := range d.routes {
		logger.Info("route", "pattern", r.Pattern, "limit", limitText(r.Group))
	}
}

// limitText prints a route's rules; a field tagged limit:"none" has none.
func limitText(g rules.Group) string {
	if s := g.String(); s != "" {
		return s
	}
	return "none"
}
