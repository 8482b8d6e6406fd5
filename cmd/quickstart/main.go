// Command quickstart is the README's first example: a file server whose
// downloads are rate-limited per client IP and per user, in Redis.
package main

import (
	"log"
	"net/http"

	"github.com/redis/go-redis/v9"

	"github.com/slidelimit/slidelimit"
)

// API declares each route and its rule group in struct tags.
type API struct {
	Files http.HandlerFunc `route:"GET /files/{id}" limit:"ip:5/s,100/min; user:1000/h; exempt:superadmin; role(admin)=ip:30/min"`
}

func main() {
	rdb := redis.NewClient(&redis.Options{
		Addr:                  "localhost:6379",
		ContextTimeoutEnabled: true, // the engine's timeout (100 ms) reaches the socket
		DialerRetries:         1,    // a refused connection fails at once...
		MaxRetries:            -1,   // ...instead of being retried until the timeout
	})
	defer rdb.Close()

	// Declared roles: a misspelt role in a tag fails Register. Warnings
	// (Redis down, a memory policy that may evict) go to slog.Default().
	lim, err := slidelimit.New(rdb,
		slidelimit.WithRoles("user", "admin", "superadmin"),
		slidelimit.WithIdentity(caller),
	)
	if err != nil {
		log.Fatal(err)
	}
	defer lim.Close()

	mux := http.NewServeMux()
	files := func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("file " + r.PathValue("id") + "\n")) }
	if err := lim.Register(mux, &API{Files: files}); err != nil {
		log.Fatal(err)
	}
	log.Fatal(http.ListenAndServe("localhost:8080", mux))
}

// caller returns who made r, as the service's authentication established:
// the limiter never trusts a client header on its own. Use your own
// authentication; this one trusts a made-up header and is for trying the
// example only.
func caller(r *http.Request) (user string, roles []string) {
	if user := r.Header.Get("X-Demo-User"); user != "" {
		return user, []string{"user"}
	}
	return "", nil
}
