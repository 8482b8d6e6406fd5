package main

import (
	"encoding/json"
	"log/slog"
	"net/http"
	"strconv"
	"time"

	"github.com/slidelimit/slidelimit"
	"github.com/slidelimit/slidelimit/role"
	"github.com/slidelimit/slidelimit/rules"
)

// api is the demo service. Each handler's route and limits are declared in
// its tags and registered by slidelimit.Register; the Limiter runs before the
// handler, so a handler only runs for admitted requests.
type api struct {
	Health http.HandlerFunc `route:"GET /health" limit:"ip:5/s,100/min"`
	// Paid object-storage downloads: per user and per IP, a global budget,
	// 1 GiB a day and 100 GiB a calendar month (as billed, in Shanghai's
	// time) per user (bytes is the object's size, see objectSize), at most
	// 2 downloads of a user at once, super-admins unlimited, and the shared
	// admin account counted by IP. The request rules count distinct
	// files (distinct:path): a download manager fetching one file in many
	// range requests uses one of the minute's 10, while the byte quotas
	// count every request.
	Download http.HandlerFunc `route:"GET /files/{id}" limit:"user:10/min,200/d,2 concurrent; user[bytes]:1Gi/d~15min,100Gi/calendar month; ip:30/min; global:1000/h; exempt:superadmin; role(admin)=ip:30/min; calendar:Asia/Shanghai; distinct:path"`
	// A costly report (a few seconds of work): one running per user at a
	// time, 20 an hour.
	Report http.HandlerFunc `route:"GET /reports/{id}" limit:"user:1 concurrent; user:20/h; exempt:superadmin"`
	Upload http.HandlerFunc `route:"POST /pictures" limit:"user:20/min; exempt:superadmin"`
	// Login protection: 5 wrong passwords per account a minute (and 50
	// attempts per IP an hour); successful logins are given back, and an
	// account (or IP) that reached its limit is blocked for 15 minutes.
	Login http.HandlerFunc `route:"POST /login" limit:"key(account):5/min; ip:50/h; count:401; block:15m"`
	// Only admins may delete users; they share one account, so count by IP.
	DeleteUser http.HandlerFunc `route:"DELETE /users/{id}" limit:"role(admin)=ip:5/min; exempt:superadmin"`
	// Super-admins inspect and reset windows; the limit only slows down
	// others probing the endpoint, who get 403 anyway.
	Limits      http.HandlerFunc `route:"GET /admin/limits" limit:"ip:60/min; exempt:superadmin"`
	ResetLimits http.HandlerFunc `route:"DELETE /admin/limits" limit:"ip:60/min; exempt:superadmin"`
	// Super-admins replace a route's rules in every demo process sharing
	// the Redis, and restore them (see rules.go).
	Rules      http.HandlerFunc `route:"GET /admin/rules" limit:"ip:60/min; exempt:superadmin"`
	SetRules   http.HandlerFunc `route:"PUT /admin/rules" limit:"ip:60/min; exempt:superadmin"`
	ClearRules http.HandlerFunc `route:"DELETE /admin/rules" limit:"ip:60/min; exempt:superadmin"`
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
		Rules:       adm.rules,
		SetRules:    adm.setRules,
		ClearRules:  adm.clearRules,
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

// streamRoute is the route of streamed downloads, registered by newServer
// with its own middleware: its byte quota settles to what was sent. A
// scope: statement names its windows for the admin endpoint
// (scope=streams), since a group built by Limiter.Middleware has no tag.
var streamRoute = rules.Route{
	Field:   "Stream",
	Pattern: "GET /stream/{id}",
	Group:   rules.MustParse("user:10/min,200/d; user[bytes]:1Gi/d~15min; ip:30/min; exempt:superadmin; scope:streams"),
}

// streamObject sends the object's bytes, generated rather than stored. Its
// route admits the download against the object's size and then settles
// user[bytes] to what was written: a client that hangs up after 1 MiB of
// the 700 MiB video is charged about 1 MiB.
func streamObject(w http.ResponseWriter, r *http.Request) {
	size := sizeOf(r.PathValue("id"))
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("Content-Length", strconv.FormatInt(size, 10))
	chunk := make([]byte, 64<<10)
	for i := range chunk {
		chunk[i] = byte('a' + i%26)
	}
	for left := size; left > 0; {
		n, err := w.Write(chunk[:min(left, int64(len(chunk)))])
		left -= int64(n)
		if err != nil {
			return // the client hung up
		}
	}
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
