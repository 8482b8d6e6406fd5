package slidelimit_test

import (
	"fmt"
	"log"
	"net/http"
	"net/http/httptest"
	"strings"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/slidelimit/slidelimit"
	"github.com/slidelimit/slidelimit/middleware"
	"github.com/slidelimit/slidelimit/role"
)

// Handlers declares routes and their limits in struct tags.
type Handlers struct {
	// Files allows 2 downloads a minute per client IP; super-admins are
	// exempt and admins get 5 a minute.
	Files http.HandlerFunc `route:"GET /files/{id}" limit:"ip:2/min; exempt:superadmin; role(admin)=ip:5/min"`
	// Health is not limited, by choice: a route tag without a limit tag
	// is an error.
	Health http.HandlerFunc `route:"GET /healthz" limit:"none"`
}

func ExampleLimiter_Register() {
	mr, err := miniredis.Run() // an in-process Redis for the example; use your own
	if err != nil {
		log.Fatal(err)
	}
	defer mr.Close()
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	defer rdb.Close()

	lim, err := slidelimit.New(rdb)
	if err != nil {
		log.Fatal(err)
	}
	defer lim.Close()

	serve := func(w http.ResponseWriter, r *http.Request) { fmt.Fprintln(w, "file", r.PathValue("id")) }
	mux := http.NewServeMux()
	if err := lim.Register(mux, &Handlers{Files: serve, Health: serve}); err != nil {
		log.Fatal(err)
	}

	get := func(path string, id *role.Identity) {
		r := httptest.NewRequest("GET", path, nil)
		r.RemoteAddr = "192.0.2.1:4711"
		if id != nil {
			// Your authentication middleware does this.
			r = r.WithContext(role.NewContext(r.Context(), *id))
		}
		w := httptest.NewRecorder()
		mux.ServeHTTP(w, r)
		fmt.Println(strings.TrimSpace(fmt.Sprintln(path, w.Code, w.Header().Get("RateLimit"), w.Header().Get("Retry-After"))))
	}
	get("/files/1", nil)
	get("/files/2", nil) // the same windows as /files/1: the scope is the pattern
	get("/files/3", nil)
	get("/files/3", &role.Identity{User: "root", Roles: []role.Role{"superadmin"}})
	// Output:
	// /files/1 200 "ip-1min";r=1;t=60
	// /files/2 200 "ip-1min";r=0;t=60
	// /files/3 429 "ip-1min";r=0;t=60 60
	// /files/3 200
}

func ExampleLimiter_Handle() {
	mr, err := miniredis.Run()
	if err != nil {
		log.Fatal(err)
	}
	defer mr.Close()
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	defer rdb.Close()
	lim, err := slidelimit.New(rdb)
	if err != nil {
		log.Fatal(err)
	}
	defer lim.Close()

	mux := http.NewServeMux()
	report := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprintln(w, "report") })
	err = lim.Handle(mux, "POST /reports", report, "user:10/h; ip:3/s,20/min")
	fmt.Println(err)

	r := httptest.NewRequest("POST", "/reports", nil)
	w := httptest.NewRecorder()
	mux.ServeHTTP(w, r)
	fmt.Println(w.Code, w.Header().Get("RateLimit-Policy"))

	// Problems are errors, never panics.
	fmt.Println(lim.Handle(mux, "GET /users/{id}", report, "param(user):5/s"))
	// Output:
	// <nil>
	// 200 "user-1h";q=10;w=3600, "ip-1s";q=3;w=1, "ip-1min";q=20;w=60
	// slidelimit: route "GET /users/{id}": rules: "param(user):5/s": param "user" is not a wildcard ({user} or {user...}) of route pattern "GET /users/{id}" at offset 6
}

func ExampleLimiter_Middleware() {
	mr, err := miniredis.Run()
	if err != nil {
		log.Fatal(err)
	}
	defer mr.Close()
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	defer rdb.Close()
	lim, err := slidelimit.New(rdb, slidelimit.WithMiddlewareOptions(middleware.WithTrustedProxies("10.0.0.0/8")))
	if err != nil {
		log.Fatal(err)
	}
	defer lim.Close()

	// For a router that does not set http.Request.Pattern, name the scope.
	mw, err := lim.Middleware("ip:1/min", middleware.WithScope("search"))
	if err != nil {
		log.Fatal(err)
	}
	h := mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	for _, xff := range []string{"203.0.113.7", "203.0.113.7", "203.0.113.8"} {
		r := httptest.NewRequest("GET", "/search?q=go", nil)
		r.RemoteAddr = "10.0.0.2:80" // a trusted proxy
		r.Header.Set("X-Forwarded-For", xff)
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		fmt.Println(xff, w.Code)
	}
	// Output:
	// 203.0.113.7 200
	// 203.0.113.7 429
	// 203.0.113.8 200
}
