// Command demo serves a small API rate-limited by slidelimit, and drives
// load against it.
//
//	demo [-addr ADDR] [-redis URL | -cluster ADDR,ADDR,...]
//	demo load [-url U] [-path P] [-method M] [-token NAME] [-rps N] [-duration D] [-concurrency C] [-log FILE]
//	demo ports [N]
//
// Without -redis or -cluster the demo limits against an embedded
// miniredis. Callers authenticate with "Authorization: Bearer NAME", NAME
// being alice or bob (role user), admin (role admin) or root (role
// superadmin), or with HTTP basic authentication and the account's
// password (NAME-pw), as a browser does on the operator's page.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	// The downloads' calendar month is Shanghai's (calendar:Asia/Shanghai):
	// the zone database is embedded, so the demo starts on systems
	// without one.
	_ "time/tzdata"

	"github.com/slidelimit/slidelimit/rules"
)

const usage = `Usage:
  demo [-addr ADDR] [-redis URL | -cluster ADDR,ADDR,...]
        serve the demo API, rate-limited by slidelimit
  demo load [-url U] [-path P] [-method M] [-token NAME] [-rps N] [-duration D] [-concurrency C] [-log FILE]
        send requests at a fixed rate and count the answers per second
  demo ports [N]
        print N free loopback ports (default 1), for a Redis and demos

Accounts (Authorization: Bearer NAME): alice, bob (user), admin (admin),
root (superadmin).

Admin endpoint (superadmin only; GET never counts, DELETE resets):
  /admin/limits?scope=S&kind=K&subject=V
        S is a route pattern such as "GET /files/{id}", K a rule ID
        (ip, user, global, header(X-Api-Key)), V the raw value (alice,
        127.0.0.1); ip=ADDR instead of subject=V shows what a user limiter
        counted by client address (anonymous callers, the admin role).
  /admin/rules[?scope=S]
        GET lists the rule overrides in force; PUT with the rule text as
        body replaces the rules of S ("GET /health") in every process
        sharing the Redis, within a second; DELETE restores the code's.
  /admin/ui/
        the operator's page: the most denied subjects in the last 1m, 5m
        and 1h, active blocks with a button to lift them, the overrides
        in force, one subject's usage; JSON under /admin/ui/api/ (top,
        subject, blocks, reset). A browser signs in with basic
        authentication: root, password root-pw.

Routes and their rules:
`

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// run runs the demo with args (without the program name) until ctx is done
// and returns the exit code: 0, 1 on failure, 2 for bad usage.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) > 0 && args[0] == "load" {
		return runLoadCommand(ctx, args[1:], stdout, stderr)
	}
	if len(args) > 0 && args[0] == "ports" {
		return runPorts(args[1:], stdout, stderr)
	}
	fs := flag.NewFlagSet("demo", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), usage)
		// The routes come from the tags, so the text cannot go stale.
		if routes, err := rules.Routes(newAPI(nil, nil)); err == nil {
			for _, r := range append(routes, streamRoute) {
				fmt.Fprintf(fs.Output(), "  %-22s %s\n", r.Pattern, limitText(r.Group))
			}
		}
		fmt.Fprint(fs.Output(), "\nServe flags:\n")
		fs.PrintDefaults()
	}
	addr := fs.String("addr", "127.0.0.1:8080", "address to listen on")
	redisURL := fs.String("redis", "", "limit against the Redis server at this URL (redis://HOST:PORT/DB) instead of an embedded miniredis")
	cluster := fs.String("cluster", "", "limit against the Redis Cluster reachable at these comma-separated addresses")
	if err := fs.Parse(args); err != nil {
		return parseExit(err)
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "demo: unknown argument %q\n\n", fs.Arg(0))
		fs.Usage()
		return 2
	}
	logger := slog.New(slog.NewTextHandler(stderr, nil))
	if err := serve(ctx, *addr, *redisURL, *cluster, logger); err != nil {
		logger.Error("demo stopped", "error", err)
		return 1
	}
	return 0
}

func runLoadCommand(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	c, err := parseLoadFlags(args, stderr)
	if err != nil {
		if !errors.Is(err, flag.ErrHelp) {
			fmt.Fprintln(stderr, err)
		}
		return parseExit(err)
	}
	client := &http.Client{Timeout: 10 * time.Second}
	if err := runLoad(ctx, c, client, stdout); err != nil {
		fmt.Fprintln(stderr, err)
		return 1
	}
	return 0
}

// parseExit is the exit code for a flag parsing error: -h is a request,
// not a mistake.
func parseExit(err error) int {
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	return 2
}

// serve runs the demo server until ctx is done, then shuts it down
// gracefully: requests in flight finish, then the Limiter and the backend
// are closed.
func serve(ctx context.Context, addr, redisURL, cluster string, logger *slog.Logger) error {
	b, err := openBackend(ctx, redisURL, cluster)
	if err != nil {
		return err
	}
	defer b.close()
	d, err := newServer(b, logger)
	if err != nil {
		return err
	}
	defer d.lim.Close()

	logger.Info("backend", "redis", b.desc)
	logger.Info("roles counted by IP in user limiters", "roles", roleAdmin)
	d.logRoutes(logger)

	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("demo: %w", err)
	}
	srv := &http.Server{
		Handler:           d.handler,
		ReadHeaderTimeout: 5 * time.Second,
		ErrorLog:          slog.NewLogLogger(logger.Handler(), slog.LevelWarn),
	}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	logger.Info("listening", "addr", "http://"+ln.Addr().String(), "try", "curl -i http://"+ln.Addr().String()+"/health")

	select {
	case err := <-errc:
		return fmt.Errorf("demo: %w", err)
	case <-ctx.Done():
	}
	logger.Info("shutting down")
	sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		return fmt.Errorf("demo: shutdown: %w", err)
	}
	logger.Info("stopped")
	return nil
}
