// Command slidelimit is the operator's command of slidelimit. Install it
// with
//
//	go install github.com/slidelimit/slidelimit/cmd/slidelimit@latest
//
// Its subcommand replay runs access logs through rules, exactly as the
// engine would have decided them, and reports the would-be denials:
//
//	slidelimit replay -rules 'ip:5/s,100/min; user:1000/h' [-route 'GET /files/{id}'] [-json] [-html report.html] FILE...
//
// See docs/replay.md.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"time"

	"github.com/slidelimit/slidelimit/cmd/slidelimit/internal/replay"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	code := run(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

const usage = `Usage: slidelimit <command> [flags]

Commands:
  replay   run access logs through rules and report what they would deny
`

// run is the command; it returns the exit status: 0 done, 1 failed, 2 bad
// usage, bad rules or no parseable log line.
func run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	switch args[0] {
	case "replay":
		return replayCmd(ctx, args[1:], stdin, stdout, stderr)
	case "help", "-h", "-help", "--help":
		fmt.Fprint(stdout, usage)
		return 0
	}
	fmt.Fprintf(stderr, "slidelimit: unknown command %q\n%s", args[0], usage)
	return 2
}

func replayCmd(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("replay", flag.ContinueOnError)
	fs.SetOutput(stderr)
	rulesText := fs.String("rules", "", "rule text, as in a limit tag: 'ip:5/s,100/min; user:1000/h'")
	route := fs.String("route", "", "the ServeMux pattern the -rules apply to, as 'GET /files/{id}'; other requests are reported, not counted (default: every request)")
	rulesFile := fs.String("rules-file", "", "a file of routes: one per line, a ServeMux pattern then its rule text")
	asJSON := fs.Bool("json", false, "print one JSON object instead of text")
	htmlOut := fs.String("html", "", "also write a self-contained HTML report to this file")
	fields := fs.String("fields", "", "JSON-lines field names, as time=ts,ip=remote_addr,user=user,status=status,bytes=size (also method, path, request)")
	reorder := fs.Duration("reorder", replay.DefaultReorder, "how far out of order a log's lines may be (a log is written as requests end)")
	decider := fs.String("engine", "", "who decides: inprocess (default; fast) or script (the engine's script for every request)")
	redisURL := fs.String("redis", "", "decide with the engine's script on this Redis (redis://HOST:PORT/DB) instead of in process")
	v6 := fs.Int("ipv6-prefix", 64, "group IPv6 clients by this prefix length, as the middleware's WithIPv6Prefix (128: single addresses)")
	quiet := fs.Bool("q", false, "no progress on standard error")
	fs.Usage = func() {
		fmt.Fprint(stderr, `Usage: slidelimit replay -rules TEXT [-route PATTERN] | -rules-file FILE [flags] FILE...

Replays access logs (NCSA Common/Combined or JSON lines; - is standard input,
.gz files are gunzipped) in time order through the rules, as the engine
would have decided them at the log's own time, and reports the would-be
denials per policy and subject.

`)
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return 2
	}
	cfg := replay.Config{Reorder: *reorder, Decider: *decider, Redis: *redisURL, IPv6Prefix: *v6}
	if !*quiet {
		cfg.Progress = stderr
	}
	switch {
	case *rulesText != "" && *rulesFile != "":
		return usageErr(stderr, "give -rules or -rules-file, not both")
	case *rulesText != "":
		cfg.Routes = []replay.RouteRules{{Pattern: *route, Text: *rulesText, Origin: "-rules"}}
	case *rulesFile != "":
		if *route != "" {
			return usageErr(stderr, "-route goes with -rules; a rules file names its routes")
		}
		f, err := os.Open(*rulesFile)
		if err != nil {
			return usageErr(stderr, err.Error())
		}
		cfg.Routes, err = replay.ParseRulesFile(*rulesFile, f)
		f.Close()
		if err != nil {
			return usageErr(stderr, err.Error())
		}
	default:
		return usageErr(stderr, "give -rules or -rules-file")
	}
	var err error
	if cfg.Fields, err = replay.ParseFields(*fields); err != nil {
		return usageErr(stderr, err.Error())
	}
	if fs.NArg() == 0 {
		return usageErr(stderr, "give the log files to replay, or - for standard input")
	}
	for _, name := range fs.Args() {
		in := replay.Input{Name: name}
		if name == "-" {
			in.R = stdin
		}
		cfg.Inputs = append(cfg.Inputs, in)
	}
	cfg.ProgressEvery = time.Second
	rep, err := replay.Run(ctx, cfg)
	if rep != nil {
		rep.WriteSummary(stderr)
	}
	if err != nil {
		fmt.Fprintf(stderr, "slidelimit: %s\n", replay.Printable(err.Error()))
		var ce *replay.ConfigError
		if errors.Is(err, replay.ErrEmpty) || errors.As(err, &ce) {
			return 2
		}
		return 1
	}
	if *htmlOut != "" {
		if err := writeHTML(*htmlOut, rep); err != nil {
			fmt.Fprintf(stderr, "slidelimit: %s\n", replay.Printable(err.Error()))
			return 1
		}
	}
	if *asJSON {
		err = rep.WriteJSON(stdout)
	} else {
		err = rep.WriteText(stdout)
	}
	if err != nil {
		fmt.Fprintf(stderr, "slidelimit: %s\n", replay.Printable(err.Error()))
		return 1
	}
	return 0
}

func writeHTML(name string, rep *replay.Report) error {
	f, err := os.Create(name)
	if err != nil {
		return err
	}
	if err := rep.WriteHTML(f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

func usageErr(w io.Writer, msg string) int {
	fmt.Fprintf(w, "slidelimit replay: %s (see slidelimit replay -h)\n", replay.Printable(msg))
	return 2
}
