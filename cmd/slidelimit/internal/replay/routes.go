package replay

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"

	"github.com/slidelimit/slidelimit/internal/lifecycle"
	"github.com/slidelimit/slidelimit/internal/ruletime"
	"github.com/slidelimit/slidelimit/rules"
)

// RouteRules is one route to replay: a net/http ServeMux pattern (empty
// for every request) and its rule text, the text of a limit tag. Origin
// names where the text came from in errors ("-rules", "rules.txt:3").
type RouteRules struct {
	Pattern, Text, Origin string
}

// ParseRulesFile reads a rules file: one route per line, its ServeMux
// pattern ("GET /files/{id}", "/api/", "example.com/x") followed by its
// rule text, as in
//
//	GET /files/{id}   ip:5/s,100/min; user:1000/h
//	POST /login       ip:5/min; block:15m
//
// Blank lines and lines starting with # are skipped. A pattern has no
// spaces but the one after its method, so no separator is needed.
func ParseRulesFile(name string, r io.Reader) ([]RouteRules, error) {
	var out []RouteRules
	sc := bufio.NewScanner(r)
	n := 0
	for sc.Scan() {
		n++
		line := strings.TrimSpace(sc.Text())
		if line == "" || line[0] == '#' {
			continue
		}
		first, rest, _ := strings.Cut(line, " ")
		pattern := first
		if !strings.Contains(first, "/") { // a method
			var path string
			path, rest, _ = strings.Cut(strings.TrimLeft(rest, " \t"), " ")
			pattern = first + " " + path
		}
		text := strings.TrimSpace(rest)
		origin := name + ":" + strconv.Itoa(n)
		if text == "" || !strings.Contains(pattern, "/") {
			return nil, fmt.Errorf("replay: %s: want a route pattern followed by its rules, as in \"GET /files/{id} ip:5/s\"", origin)
		}
		out = append(out, RouteRules{Pattern: pattern, Text: text, Origin: origin})
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("replay: %s: %w", name, err)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("replay: %s: no route", name)
	}
	return out, nil
}

// route is one replayed route: its group, what a log can tell of it, and
// its statistics.
type route struct {
	pattern string
	scope   string // the engine scope: the group's Scope, else the pattern
	group   rules.Group
	params  bool // some rule is a param(name): the path values are needed
	grains  bool // some window has a grain: only the script replays it
	stats   []*policyStats
	index   [][]int // index[check][window] in stats
	blockAt []int   // blockAt[check] in stats: the rule's block, or -1
}

// Refused is a statement a log cannot express: the replay stops.
type Refused struct {
	Origin, Statement, Why string
}

func (e *Refused) Error() string {
	return fmt.Sprintf("replay: %s: %s cannot be replayed: %s", e.Origin, e.Statement, e.Why)
}

// newRoute parses rr, refuses what a log cannot express and notes what it
// ignores.
func newRoute(rr RouteRules, notes *[]string) (*route, error) {
	var g rules.Group
	var err error
	if rr.Pattern == "" {
		g, err = rules.Parse(rr.Text)
	} else {
		g, err = rules.ParseRoute(rr.Pattern, rr.Text)
	}
	if err != nil {
		return nil, fmt.Errorf("replay: %s: %w", rr.Origin, err)
	}
	rt := &route{pattern: rr.Pattern, scope: rr.Pattern, group: g}
	if g.Scope != "" {
		rt.scope = g.Scope
	}
	if rt.scope == "" {
		rt.scope = "/"
	}
	var errs []error
	refuse := func(stmt, why string) { errs = append(errs, &Refused{Origin: rr.Origin, Statement: stmt, Why: why}) }
	for _, l := range g.Rules {
		switch l.Kind {
		case rules.Header:
			refuse(l.ID(), "an access log has no request headers")
		case rules.Key:
			refuse(l.ID(), "key functions run in the server; a log has only their requests")
		case rules.Param:
			rt.params = true
			if rr.Pattern == "" {
				refuse(l.ID(), "a path value needs the route whose wildcard names it (-route)")
			}
		}
		if l.Cost != "" && l.Cost != "bytes" && !lifecycle.IsDecimal(l.Cost) {
			refuse(l.ID(), "cost functions other than bytes (the logged size) run in the server")
		}
		for _, w := range l.Windows {
			switch {
			case w.LimitFunc != "":
				refuse(l.ID()+":$"+w.LimitFunc, "limit functions give per-request limits a log does not have")
			case w.Concurrent:
				refuse(l.ID()+":"+strconv.FormatInt(w.Limit, 10)+" concurrent", "in-flight windows need each request's duration, which the log formats read here do not have")
			case w.Grain > 0:
				rt.grains = true
			}
		}
	}
	refused, windows := unknownStatements(&g)
	for _, f := range refused {
		refuse(f, "a statement the replay does not know yet")
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	where := rr.Origin
	if len(windows) > 0 {
		rt.grains = true // the script decides it
		*notes = append(*notes, where+": "+strings.Join(slices.Compact(windows), ", ")+": windows the in-process decider does not model; every request goes through the engine's script (slower)")
	}
	if len(g.RoleRules) > 0 || len(g.Exempt) > 0 {
		*notes = append(*notes, where+": role rules and exempt roles ignored: a log carries no roles, so every request is replayed with the default limiters")
	}
	if g.Mode == rules.Shadow {
		*notes = append(*notes, where+": shadow mode replayed as enforced: the replay reports what enforcing would deny, blocks included")
	}
	if g.Fail != rules.FailDefault {
		*notes = append(*notes, where+": fail mode ignored: the replay never loses its Redis")
	}
	rt.index = make([][]int, len(g.Rules))
	rt.blockAt = make([]int, len(g.Rules))
	for i, l := range g.Rules {
		for _, w := range l.Windows {
			rt.index[i] = append(rt.index[i], len(rt.stats))
			rt.stats = append(rt.stats, newPolicyStats(rt.pattern, lifecycle.PolicyName(l, w), l.ID(), w.String(), w.Limit))
		}
		rt.blockAt[i] = -1
		if g.Block > 0 {
			rt.blockAt[i] = len(rt.stats)
			rt.stats = append(rt.stats, newPolicyStats(rt.pattern, l.ID()+"-block", l.ID(), "block:"+ruletime.FormatPeriod(g.Block), 0))
		}
	}
	return rt, nil
}

// router picks each record's route as net/http's ServeMux would. It is
// not safe for concurrent use.
type router struct {
	all    *route // the one route of -rules without -route
	mux    *http.ServeMux
	routes map[string]*route
	got    *http.Request // the request the mux served last, with its path values
}

func newRouter(rs []*route) (*router, error) {
	if len(rs) == 1 && rs[0].pattern == "" {
		return &router{all: rs[0]}, nil
	}
	rt := &router{mux: http.NewServeMux(), routes: map[string]*route{}}
	for _, r := range rs {
		if r.pattern == "" {
			return nil, errors.New("replay: -rules without -route cannot be combined with routes")
		}
		if _, dup := rt.routes[r.pattern]; dup {
			return nil, fmt.Errorf("replay: route %q given twice", r.pattern)
		}
		err := func() (err error) {
			defer func() { // ServeMux panics on conflicting or malformed patterns
				if p := recover(); p != nil {
					err = fmt.Errorf("replay: route %q: %v", r.pattern, p)
				}
			}()
			rt.mux.HandleFunc(r.pattern, func(_ http.ResponseWriter, q *http.Request) { rt.got = q })
			return nil
		}()
		if err != nil {
			return nil, err
		}
		rt.routes[r.pattern] = r
	}
	return rt, nil
}

// match returns the route of rec and the request with its path values; a
// nil route when none matches, or when ServeMux would redirect the request
// (no limited handler runs then).
func (rt *router) match(rec *Record) (*route, *http.Request) {
	if rt.all != nil {
		return rt.all, nil
	}
	u, err := url.ParseRequestURI(rec.Target)
	if err != nil {
		return nil, nil
	}
	req := &http.Request{Method: rec.Method, URL: u, Host: u.Host, RequestURI: rec.Target, Header: http.Header{}}
	// ServeHTTP, not Handler: Handler names the pattern a redirect leads
	// to, and only ServeHTTP sets the path values.
	rt.got = nil
	rt.mux.ServeHTTP(discard{}, req)
	if rt.got == nil {
		return nil, nil // not found, or redirected: no limited handler runs
	}
	return rt.routes[rt.got.Pattern], rt.got
}

// discard is a ResponseWriter that writes nowhere.
type discard struct{}

func (discard) Header() http.Header         { return http.Header{} }
func (discard) Write(b []byte) (int, error) { return len(b), nil }
func (discard) WriteHeader(int)             {}
