package main

import (
	"encoding/json"
	"log/slog"
	"net/http"
	"time"

	"github.com/slidelimit/slidelimit"
	"github.com/slidelimit/slidelimit/role"
)

// api is the demo service. Each handler's route and limits are declared in
// its tags and registered by slidelimit.Register; the limiter runs before the
// handler, so a handler only runs for admitted requests.
type api struct {
	Health http.HandlerFunc `route:"GET /health" limit:"ip:5/s,100/min"`
	// Paid object-storage downloads: per user and per IP, a global budget,
	// 1 GiB a day per user (bytes is the object's size, see objectSize),
	// at most 2 downloads of a user at once, super-admins unlimited, and
	// the shared admin account counted by IP.
	Download http.HandlerFunc `route:"GET /files/{id}" limit:"user:10/min,200/d,2 concurrent; user[bytes]:1Gi/d~15min; ip:30/min; global:1000/h; exempt:superadmin; role(admin)=ip:30/min"`
	// A costly report (a few seconds of work): one running per user at a
	// time, 20 an hour.
	Report http.HandlerFunc `route:"GET /reports/{id}" limit:"user:1 concurrent; user:20/h; exempt:superadmin"`
	Upload http.HandlerFunc `route:"POST /pictures" limit:"user:20/min; exempt:superadmin"`
	// Login protection: 5 wrong passwords per account a day (and 50
	// attempts per IP an hour); successful logins are given back.
	Login http.HandlerFunc `route:"POST /login" limit:"key(account):5/d; ip:50/h; count:401"`
	// Only admins may delete users; they share one account, so count by IP.
	DeleteUser http.HandlerFunc `route:"DELETE /users/{id}" limit:"role(admin)=ip:5/min; exempt:superadmin"`
	// Super-admins inspect and reset windows; the limit only slows down
	// others probing the endpoint, who get 403 anyway.
	Limits      http.HandlerFunc `route:"GET /admin/limits" limit:"ip:60/min; exempt:superadmin"`
	ResetLimits http.HandlerFunc `route:"DELETE /admin/limits" limit:"ip:60/min; exempt:superadmin"`
}

// newAPI returns the demo's handlers; the admin ones inspect windows
// through lim.
func newAPI(lim *slidelimit.Limiter, logger *slog.Logger) *api {
	adm := &admin{lim: lim, logger: logger}
	return &api{
		Health: func(w http.ResponseWriter, r *http.Request) {
			writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
		},
		Download: func(w http.ResponseWriter, r *http.Request) {
			id := r.PathValue("id")
			writeJSON(w, http.StatusOK, map[string]any{"file": id, "bytes": sizeOf(id), "caller": caller(r)})
		},
		Report: func(w http.ResponseWriter, r *http.Request) {
			select {
			case <-time.After(reportWork):
			case <-r.Context().Done():
				return // the client left: the work stops, and the slot is released all the same
			}
			writeJSON(w, http.StatusOK, map[string]string{"report": r.PathValue("id"), "caller": caller(r)})
		},
		Upload: func(w http.ResponseWriter, r *http.Request) {
			if _, ok := role.FromContext(r.Context()); !ok {
				http.Error(w, "sign in to upload", http.StatusUnauthorized)
				return
			}
			writeJSON(w, http.StatusCreated, map[string]string{"uploaded": "picture", "caller": caller(r)})
		},
		Login: func(w http.ResponseWriter, r *http.Request) {
			name := r.PostFormValue("account")
			if _, known := accounts[name]; !known || r.PostFormValue("password") != passwords[name] {
				http.Error(w, "wrong account or password", http.StatusUnauthorized)
				return
			}
			writeJSON(w, http.StatusOK, map[string]string{"welcome": name})
		},
		DeleteUser: func(w http.ResponseWriter, r *http.Request) {
			if !requireRole(w, r, roleAdmin, roleSuperadmin) {
				return
			}
			writeJSON(w, http.StatusOK, map[string]string{"deleted": r.PathValue("id"), "caller": caller(r)})
		},
		Limits:      adm.peek,
		ResetLimits: adm.reset,
	}
}

// reportWork is how long a report takes to compute.
const reportWork = 3 * time.Second

// objects are the demo's stored objects with a size of their own; every
// other id is a 10 MiB file.
var objects = map[string]int64{
	"video":   700 << 20,
	"archive": 3 << 30, // more than a day's quota: never downloadable
}

func sizeOf(id string) int64 {
	if size, ok := objects[id]; ok {
		return size
	}
	return 10 << 20
}

// objectSize is the cost function "bytes": a download counts the size of
// its object, known before the handler sends it.
func objectSize(r *http.Request) (int64, error) { return sizeOf(r.PathValue("id")), nil }

func caller(r *http.Request) string {
	if id, ok := role.FromContext(r.Context()); ok {
		return id.User
	}
	return "anonymous"
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	// The status is sent; a client gone away is not worth reporting.
	_ = json.NewEncoder(w).Encode(v)
}
