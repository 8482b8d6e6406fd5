package main

import (
	"crypto/subtle"
	"net/http"
	"strings"

	"github.com/slidelimit/slidelimit/role"
)

// Demo roles.
const (
	roleUser       role.Role = "user"
	roleAdmin      role.Role = "admin"
	roleSuperadmin role.Role = "superadmin"
)

// accounts are the demo's built-in users. A real service puts identity into
// the request context from its own authentication (sessions, JWT, mTLS...);
// slidelimit only reads it back with role.FromContext.
var accounts = map[string]role.Identity{
	"alice": {User: "alice", Roles: []role.Role{roleUser}},
	"bob":   {User: "bob", Roles: []role.Role{roleUser}},
	"admin": {User: "admin", Roles: []role.Role{roleAdmin}},
	"root":  {User: "root", Roles: []role.Role{roleSuperadmin}},
}

// passwords are the demo accounts' passwords, for POST /login, which shows
// login protection, and for HTTP basic authentication, with which a browser
// opens the operator's page.
var passwords = map[string]string{
	"alice": "alice-pw",
	"bob":   "bob-pw",
	"admin": "admin-pw",
	"root":  "root-pw",
}

// loginAccount is the key(account) function of POST /login: the account
// named in the form, so failures count per account whoever sends them.
func loginAccount(r *http.Request) string { return r.PostFormValue("account") }

// authenticate is the demo's authentication, and the only source of
// identity: "Authorization: Bearer <name>" with a built-in account name, or
// HTTP basic authentication with an account's name and password; anything
// else is anonymous. It runs before the rate limiter so that the Limiter
// sees who is calling.
func authenticate(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if id, ok := identify(r); ok {
			r = r.WithContext(role.NewContext(r.Context(), id))
		}
		next.ServeHTTP(w, r)
	})
}

// identify returns the account r authenticates as.
func identify(r *http.Request) (role.Identity, bool) {
	if name, pw, ok := r.BasicAuth(); ok {
		want, known := passwords[name]
		if !known || subtle.ConstantTimeCompare([]byte(pw), []byte(want)) != 1 {
			return role.Identity{}, false
		}
		id, ok := accounts[name]
		return id, ok
	}
	name, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if !ok {
		return role.Identity{}, false
	}
	id, ok := accounts[strings.TrimSpace(name)]
	return id, ok
}

// askLogin lets a browser open h: an anonymous request gets, with h's 401,
// a basic-authentication challenge, so the browser asks for an account's
// name and password and sends them with every request to h.
func askLogin(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, ok := role.FromContext(r.Context()); !ok {
			w.Header().Set("WWW-Authenticate", `Basic realm="slidelimit demo", charset="UTF-8"`)
		}
		h.ServeHTTP(w, r)
	})
}

// requireRole answers 403 unless the caller holds one of roles.
func requireRole(w http.ResponseWriter, r *http.Request, roles ...role.Role) bool {
	id, _ := role.FromContext(r.Context())
	for _, want := range roles {
		if id.Has(want) {
			return true
		}
	}
	http.Error(w, "forbidden", http.StatusForbidden)
	return false
}
