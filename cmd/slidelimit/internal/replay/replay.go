package replay

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/slidelimit/slidelimit/engine"
	"github.com/slidelimit/slidelimit/internal/lifecycle"
	"github.com/slidelimit/slidelimit/middleware"
	"github.com/slidelimit/slidelimit/rules"
)

// Deciders of Config.Decider.
const (
	// Auto decides in process, unless a window has a grain: then every
	// request goes through the engine's script on the embedded miniredis.
	Auto = ""
	// InProcess decides in process (see local), which the differential
	// test holds to the script's decisions.
	InProcess = "inprocess"
	// Script sends every request through the engine and its script, on
	// Config.Redis or an embedded miniredis: exact by construction, about
	// 300 µs a request on miniredis.
	Script = "script"
)

// DefaultReorder is the default reorder horizon: how far out of order a
// log's lines may be (a log is written as requests end, so a request that
// ran for a minute is logged a minute after later, shorter ones).
const DefaultReorder = 5 * time.Minute

// Config is what Run replays.
type Config struct {
	// Routes are the routes and their rules; one route with an empty
	// pattern takes every request.
	Routes []RouteRules
	// Inputs are the logs, each in its own format (detected).
	Inputs []Input
	// Fields maps the fields of JSON-lines logs; the zero value means
	// DefaultFields.
	Fields Fields
	// Reorder is the reorder horizon; 0 means DefaultReorder.
	Reorder time.Duration
	// Decider is Auto, InProcess or Script.
	Decider string
	// Redis is the URL of the Redis the Script decider uses; empty embeds
	// a miniredis.
	Redis string
	// Progress, when not nil, gets a progress line about every
	// ProgressEvery (default 1 s) on long logs.
	Progress      io.Writer
	ProgressEvery time.Duration
	// IPv6Prefix groups IPv6 clients by this prefix length, as the
	// middleware's WithIPv6Prefix; 0 means its default, 64.
	IPv6Prefix int
	// OnDecision, when not nil, is called with every replayed request and
	// whether it was admitted, in replay order.
	OnDecision func(rec Record, allowed bool)
}

// ErrEmpty is returned by Run when the logs have no parseable line.
var ErrEmpty = errors.New("replay: no parseable log line")

// ConfigError is returned by Run for a Config it cannot replay with: bad
// rules (Err then matches the rules package's errors, positions
// included), statements a log cannot express (*Refused), conflicting
// routes or bad options. Nothing was read.
type ConfigError struct{ Err error }

func (e *ConfigError) Error() string { return e.Err.Error() }
func (e *ConfigError) Unwrap() error { return e.Err }

// Run replays cfg's logs in time order through their routes' rules and
// reports what the rules would have denied.
func Run(ctx context.Context, cfg Config) (*Report, error) {
	start := time.Now()
	rep := &Report{}
	routes := make([]*route, 0, len(cfg.Routes))
	var errs []error
	grains := false
	for _, rr := range cfg.Routes {
		r, err := newRoute(rr, &rep.Notes)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		grains = grains || r.grains
		routes = append(routes, r)
	}
	if len(errs) > 0 {
		return nil, &ConfigError{errors.Join(errs...)}
	}
	if len(routes) == 0 {
		return nil, &ConfigError{errors.New("replay: no rules (give -rules or -rules-file)")}
	}
	rt, err := newRouter(routes)
	if err != nil {
		return nil, &ConfigError{err}
	}
	client := lifecycle.ClientIP{V6Bits: lifecycle.DefaultIPv6Prefix}
	if cfg.IPv6Prefix != 0 {
		if _, err := middleware.Subject(rules.IP, "::1", middleware.WithIPv6Prefix(cfg.IPv6Prefix)); err != nil {
			return nil, &ConfigError{fmt.Errorf("replay: -ipv6-prefix: %w", err)}
		}
		client.V6Bits = cfg.IPv6Prefix
	}
	dec, err := newDecider(&cfg, grains, rep)
	if err != nil {
		return nil, err
	}
	defer dec.Close()
	r := &run{cfg: &cfg, rep: rep, rt: rt, dec: dec, subjects: map[string]*SubjectStats{}, client: client}
	if err := r.inputs(); err != nil {
		return nil, err
	}
	defer r.close()
	if err := r.loop(ctx); err != nil {
		return nil, err
	}
	r.finish(routes)
	rep.Elapsed = time.Since(start)
	if rep.Requests+rep.Unmatched == 0 {
		return rep, fmt.Errorf("%w: %d lines read, %d unparseable", ErrEmpty, rep.Lines, rep.Bad)
	}
	return rep, nil
}

func newDecider(cfg *Config, grains bool, rep *Report) (decider, error) {
	switch cfg.Decider {
	case InProcess:
		if grains {
			return nil, &ConfigError{errors.New("replay: windows with a grain are replayed by the script only (-engine script)")}
		}
	case Script:
	case Auto:
		if !grains && cfg.Redis == "" {
			break
		}
		if grains {
			rep.Notes = append(rep.Notes, "windows with a grain: every request goes through the engine's script (slower)")
		}
	default:
		return nil, &ConfigError{fmt.Errorf("replay: unknown decider %q (want %s or %s)", cfg.Decider, InProcess, Script)}
	}
	if cfg.Decider == Script || grains || cfg.Redis != "" {
		s, err := newScript(cfg.Redis)
		if err != nil {
			return nil, err
		}
		rep.Decider = "engine script on embedded miniredis"
		if cfg.Redis != "" {
			rep.Decider = "engine script on " + cfg.Redis
		}
		return s, nil
	}
	rep.Decider = "in-process (held to the script by a differential test)"
	return newLocal(), nil
}

// run is one replay in progress.
type run struct {
	cfg      *Config
	rep      *Report
	rt       *router
	dec      decider
	m        merger
	srcs     []*source
	bad      badLines
	late     badLines
	lines    int64
	read     atomic.Int64 // bytes read from the inputs
	held     int64        // bytes the reorder buffers hold
	size     int64        // their total size; 0 when unknown
	subjects map[string]*SubjectStats
	minutes  timeline
	req      engine.Request
	v        verdict
	seen     []string // subjects of the current request
	client   lifecycle.ClientIP
}

func (r *run) inputs() error {
	fields := r.cfg.Fields
	if fields == (Fields{}) {
		fields = DefaultFields
	}
	horizon := r.cfg.Reorder
	if horizon <= 0 {
		horizon = DefaultReorder
	}
	if len(r.cfg.Inputs) == 0 {
		return &ConfigError{errors.New("replay: no log file (give FILE..., or - for standard input)")}
	}
	known := true
	for i, in := range r.cfg.Inputs {
		s, err := open(in, i, &r.read)
		if err != nil {
			r.close()
			return err
		}
		s.fields, s.bad, s.lines = &fields, &r.bad, &r.lines
		if _, ok := r.dec.(*script); ok {
			s.from = minScriptTime
		}
		r.srcs = append(r.srcs, s)
		r.m.ins = append(r.m.ins, &sorted{src: s, horizon: horizon.Microseconds(), late: &r.late, held: &r.held, budget: MaxReorder})
		if fi, err := os.Stat(in.Name); in.R == nil && in.Name != "-" && err == nil {
			r.size += fi.Size()
		} else {
			known = false
		}
	}
	if !known {
		r.size = 0
	}
	return nil
}

func (r *run) close() {
	for _, s := range r.srcs {
		s.close()
	}
}

func (r *run) loop(ctx context.Context) error {
	every := r.cfg.ProgressEvery
	if every <= 0 {
		every = time.Second
	}
	began := time.Now()
	lastShow := began
	var rec Record
	for n := 0; ; n++ {
		ok, err := r.m.next(&rec)
		if err != nil {
			return err
		}
		if !ok {
			return nil
		}
		if n&4095 == 0 {
			if err := ctx.Err(); err != nil {
				return err
			}
			if now := time.Now(); r.cfg.Progress != nil && now.Sub(lastShow) >= every {
				lastShow = now
				r.progress(now.Sub(began))
			}
		}
		if err := r.one(&rec); err != nil {
			return fmt.Errorf("%s:%d: %w", r.srcs[rec.File].name, rec.Line, err)
		}
	}
}

func (r *run) progress(el time.Duration) {
	msg := fmt.Sprintf("replay: %d lines, %.0f lines/s", r.lines, float64(r.lines)/el.Seconds())
	if r.size > 0 {
		msg += fmt.Sprintf(", %.0f%% of the input", 100*float64(r.read.Load())/float64(r.size))
	}
	fmt.Fprintln(r.cfg.Progress, msg)
}

// one replays one request.
func (r *run) one(rec *Record) error {
	rt, hreq := r.rt.match(rec)
	if rt == nil {
		r.rep.Unmatched++
		return nil
	}
	if r.rep.Requests == 0 {
		r.rep.First = time.UnixMicro(rec.Time).UTC()
	}
	r.rep.Last = time.UnixMicro(rec.Time).UTC()
	r.rep.Requests++
	r.checks(rt, rec, hreq)
	if !r.oversized(rt) {
		if err := r.dec.decide(rt.scope, &r.req, lifecycle.Counts(rt.group.Count, rec.Status), rec.Time, &r.v); err != nil {
			return err
		}
	}
	r.account(rt, rec)
	if r.cfg.OnDecision != nil {
		r.cfg.OnDecision(*rec, r.v.allowed)
	}
	return nil
}

// checks builds the engine checks of rec as every transport does
// (lifecycle.SubjectFor, lifecycle.ClientIP): subjects from the client
// address and authuser (anonymous is counted by IP), the group's block, and
// costs (bytes is the logged size, at least 1).
func (r *run) checks(rt *route, rec *Record, hreq *http.Request) {
	ls := rt.group.Rules
	cs := r.req.Checks[:0]
	var ip string
	for _, l := range ls {
		c := engine.Check{Rule: l, Block: rt.group.Block}
		var v string
		if l.Kind == rules.Param {
			v = hreq.PathValue(l.Name)
		}
		if c.Subject = lifecycle.SubjectFor(l.Kind, rec.User, false, v); c.Subject == "" {
			if ip == "" {
				// The logged address is the peer's: no proxy header is
				// read. An address with a port ("192.0.2.1:5123") counts
				// by its address, a host name (Apache's HostnameLookups)
				// as "peer:" and the name.
				ip = r.client.Subject(rec.IP, nil)
			}
			c.Subject = ip
		}
		switch {
		case l.Cost == "bytes":
			c.Cost = max(rec.Bytes, 1)
		case l.Cost != "":
			c.Cost, _ = strconv.ParseInt(l.Cost, 10, 64)
		}
		cs = append(cs, c)
	}
	r.req.Checks = cs
}

// oversized decides, as the middleware does without asking the engine, a
// request that costs more than a window's whole limit: denied, counted
// nowhere, starting no block.
func (r *run) oversized(rt *route) bool {
	r.v.reset(&r.req)
	over := false
	for i, c := range r.req.Checks {
		if c.Cost <= 1 {
			continue
		}
		for j, w := range c.Windows {
			if c.Cost > w.Limit {
				r.v.checks[i].full[j], over = true, true
			}
		}
	}
	return over
}
