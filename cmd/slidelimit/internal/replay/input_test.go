package replay

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/slidelimit/slidelimit/rules"
)

func runText(t *testing.T, cfg Config) (*Report, error) {
	t.Helper()
	if cfg.Decider == "" {
		cfg.Decider = InProcess
	}
	return Run(context.Background(), cfg)
}

// TestFormats replays the same traffic as CLF, gzipped CLF, JSON lines and
// from a reader, and requires the same report.
func TestFormats(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(3, 3))
	rs := traffic(rng, 2000, 10*time.Minute, time.Second)
	slices.SortStableFunc(rs, func(a, b req) int { return a.t.Compare(b.t) })
	logged := shuffleNear(rng, rs, 20*time.Second)
	text := "ip:5/s,30/min; user:20/min; block:10s"
	fields := Fields{Time: "ts", IP: "remote_addr", User: "user", Status: "status", Bytes: "size", Request: "request"}
	var reps []*Report
	for _, name := range []string{"access.log", "access.log.gz", "access.jsonl", "access.jsonl.gz"} {
		line := req.clf
		if strings.Contains(name, "json") {
			line = req.json
		}
		rep, err := runText(t, Config{Routes: []RouteRules{{Text: text}}, Inputs: []Input{{Name: writeLog(t, name, logged, line)}}, Fields: fields})
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		reps = append(reps, rep)
	}
	want, _ := reference(mustGroup(text), logged)
	for i, rep := range reps {
		if !mapsEqual(subjectsOf(rep), want) {
			t.Errorf("input %d: subjects %v, want %v", i, subjectsOf(rep), want)
		}
	}
}

// TestUnixTimes reads JSON-lines times in Unix seconds and milliseconds.
func TestUnixTimes(t *testing.T) {
	t.Parallel()
	log := `{"t": 1764151200, "ip": "192.0.2.1", "request": "GET / HTTP/1.1", "status": 200}
{"t": 1764151200500, "ip": "192.0.2.1", "request": "GET / HTTP/1.1", "status": 200}
{"t": "1764151200.9", "ip": "192.0.2.1", "request": "GET / HTTP/1.1", "status": 200}
{"t": 1764151201, "ip": "192.0.2.1:5123", "request": "GET / HTTP/1.1", "status": 200}
`
	f, _ := ParseFields("time=t")
	var times []int64
	rep, err := runText(t, Config{Routes: []RouteRules{{Text: "ip:2/s"}}, Inputs: []Input{{Name: "-", R: strings.NewReader(log)}}, Fields: f,
		OnDecision: func(r Record, _ bool) { times = append(times, r.Time) }})
	if err != nil {
		t.Fatal(err)
	}
	want := []int64{1764151200_000000, 1764151200_500000, 1764151200_900000, 1764151201_000000}
	if !slices.Equal(times, want) || rep.Denied != 1 || len(rep.Subjects) != 1 {
		t.Errorf("times %v denied %d, want %v and 1", times, rep.Denied, want)
	}
}

// TestBadLines counts unparseable lines, names the first five, and still
// replays the rest.
func TestBadLines(t *testing.T) {
	t.Parallel()
	var b strings.Builder
	good := req{t: t0, ip: "192.0.2.1", path: "/", status: 200, bytes: 10}
	for i := 1; i <= 20; i++ {
		if i%3 == 0 {
			b.WriteString("this is not a log line\n")
		} else {
			b.WriteString(good.clf())
		}
	}
	rep, err := runText(t, Config{Routes: []RouteRules{{Text: "ip:5/s"}}, Inputs: []Input{{Name: "x.log", R: strings.NewReader(b.String())}}})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Bad != 6 || rep.Requests != 14 || rep.Denied != 9 {
		t.Errorf("bad %d requests %d denied %d, want 6 14 9", rep.Bad, rep.Requests, rep.Denied)
	}
	var lines []string
	for _, l := range rep.BadFirst {
		n, _, _ := strings.Cut(strings.TrimPrefix(l, "x.log:"), ":")
		lines = append(lines, n)
	}
	if !slices.Equal(lines, []string{"3", "6", "9", "12", "15"}) {
		t.Errorf("first bad lines %q", rep.BadFirst)
	}
	var sum strings.Builder
	rep.WriteSummary(&sum)
	if !strings.Contains(sum.String(), "6 unparseable lines") || !strings.Contains(sum.String(), "x.log:3:") {
		t.Errorf("summary:\n%s", sum.String())
	}
}

// TestEmpty fails with ErrEmpty on an empty log and on one without a
// parseable line.
func TestEmpty(t *testing.T) {
	t.Parallel()
	for _, log := range []string{"", "\n\n", "nothing\nto see\n"} {
		_, err := runText(t, Config{Routes: []RouteRules{{Text: "ip:5/s"}}, Inputs: []Input{{Name: "-", R: strings.NewReader(log)}}})
		if !errors.Is(err, ErrEmpty) {
			t.Errorf("%q: err %v, want ErrEmpty", log, err)
		}
	}
}

// TestOutOfOrder replays lines written as requests end: equal times keep
// file order, lines out of order within the horizon are sorted, and a line
// further behind is late: reported, not replayed.
func TestOutOfOrder(t *testing.T) {
	t.Parallel()
	at := func(s int, ip string) string {
		return req{t: t0.Add(time.Duration(s) * time.Second), ip: ip, path: "/", status: 200}.clf()
	}
	log := at(10, "192.0.2.1") + at(5, "192.0.2.2") + at(10, "192.0.2.3") + at(7, "192.0.2.4") +
		at(400, "192.0.2.5") + at(8, "192.0.2.6") + at(401, "192.0.2.7")
	var order []string
	rep, err := runText(t, Config{Routes: []RouteRules{{Text: "ip:5/s"}}, Inputs: []Input{{Name: "a.log", R: strings.NewReader(log)}},
		Reorder:    time.Minute,
		OnDecision: func(r Record, _ bool) { order = append(order, r.IP) }})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"192.0.2.2", "192.0.2.4", "192.0.2.1", "192.0.2.3", "192.0.2.5", "192.0.2.7"}
	if !slices.Equal(order, want) {
		t.Errorf("order %v, want %v", order, want)
	}
	if rep.Late != 1 || len(rep.LateFirst) != 1 || !strings.HasPrefix(rep.LateFirst[0], "a.log:6:") {
		t.Errorf("late %d %q, want line 6", rep.Late, rep.LateFirst)
	}
}

// TestSeveralFiles merges two servers' logs of the same minutes in time
// order, input order first for equal times.
func TestSeveralFiles(t *testing.T) {
	t.Parallel()
	line := func(s int, ip string) string {
		return req{t: t0.Add(time.Duration(s) * time.Second), ip: ip, path: "/", status: 200}.clf()
	}
	a := line(1, "192.0.2.1") + line(3, "192.0.2.1")
	b := line(1, "192.0.2.2") + line(2, "192.0.2.2")
	var order []string
	_, err := runText(t, Config{Routes: []RouteRules{{Text: "ip:5/s"}},
		Inputs:     []Input{{Name: "a", R: strings.NewReader(a)}, {Name: "b", R: strings.NewReader(b)}},
		OnDecision: func(r Record, _ bool) { order = append(order, r.IP+"@"+time.UnixMicro(r.Time).UTC().Format("05")) }})
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"192.0.2.1@01", "192.0.2.2@01", "192.0.2.2@02", "192.0.2.1@03"}; !slices.Equal(order, want) {
		t.Errorf("order %v, want %v", order, want)
	}
}

// TestRoutes sends each request to the route ServeMux picks: -route alone,
// and a rules file with two routes; unmatched requests are reported, not
// counted; param(id) counts by the path value.
func TestRoutes(t *testing.T) {
	t.Parallel()
	var b strings.Builder
	for i := range 10 {
		for _, p := range []string{"/files/1", "/files/2?x=1", "/login", "/other"} {
			b.WriteString(req{t: t0.Add(time.Duration(i) * 100 * time.Millisecond), ip: "192.0.2.1", path: p, status: 200}.clf())
		}
	}
	log := b.String()
	t.Run("route", func(t *testing.T) {
		rep, err := runText(t, Config{Routes: []RouteRules{{Pattern: "GET /files/{id}", Text: "ip:4/s", Origin: "-rules"}},
			Inputs: []Input{{Name: "-", R: strings.NewReader(log)}}})
		if err != nil {
			t.Fatal(err)
		}
		if rep.Requests != 20 || rep.Unmatched != 20 || rep.Denied != 16 {
			t.Errorf("requests %d unmatched %d denied %d, want 20 20 16", rep.Requests, rep.Unmatched, rep.Denied)
		}
	})
	t.Run("file", func(t *testing.T) {
		file := "# two routes\nGET /files/{id}  param(id):3/s\n\nPOST /login ip:1/s\nGET /login   ip:2/s; block:1m\n"
		rr, err := ParseRulesFile("rules.txt", strings.NewReader(file))
		if err != nil {
			t.Fatal(err)
		}
		rep, err := runText(t, Config{Routes: rr, Inputs: []Input{{Name: "-", R: strings.NewReader(log)}}})
		if err != nil {
			t.Fatal(err)
		}
		// files: 3 of 10 per id admitted; login: 2 admitted, then blocked.
		if rep.Requests != 30 || rep.Unmatched != 10 || rep.Denied != 7+7+8 {
			t.Errorf("requests %d unmatched %d denied %d, want 30 10 22", rep.Requests, rep.Unmatched, rep.Denied)
		}
		got := subjectsOf(rep)
		if got["param:1"] != [2]int64{10, 7} || got["param:2"] != [2]int64{10, 7} || got["ip:192.0.2.1"] != [2]int64{10, 8} {
			t.Errorf("subjects %v", got)
		}
		for _, p := range rep.Policies {
			// The 2/s window's denial started the one block, which denied 7.
			if p.Route == "GET /login" && (p.Blocks != 1 || p.Policy == "ip-block" && p.Denied != 7) {
				t.Errorf("policy %+v: want 1 block started", p)
			}
		}
	})
}

// TestInexpressible refuses what a log cannot express, naming it, and
// notes what it ignores.
func TestInexpressible(t *testing.T) {
	t.Parallel()
	in := []Input{{Name: "-", R: strings.NewReader(req{t: t0, ip: "192.0.2.1", path: "/", status: 200}.clf())}}
	for text, want := range map[string]string{
		"header(X-Api-Key):5/s": "header(X-Api-Key) cannot be replayed",
		"key(tenant):5/s":       "key(tenant) cannot be replayed",
		"user:$quota/h":         "limit functions",
		"user:5 concurrent":     "in-flight windows",
		"ip[tokens]:5/s":        "cost functions other than bytes",
		"ip:5/s oops":           "-rules",
	} {
		_, err := runText(t, Config{Routes: []RouteRules{{Text: text, Origin: "-rules"}}, Inputs: in})
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: err %v, want it to say %q", text, err, want)
		}
	}
	rep, err := runText(t, Config{Routes: []RouteRules{{Text: "ip:5/s; role(admin) = ip:50/s; exempt: root; mode: shadow", Origin: "-rules"}}, Inputs: in})
	if err != nil {
		t.Fatal(err)
	}
	notes := strings.Join(rep.Notes, "\n")
	if !strings.Contains(notes, "role rules and exempt roles ignored") || !strings.Contains(notes, "shadow mode replayed as enforced") {
		t.Errorf("notes %q", notes)
	}
}

func mustGroup(text string) rules.Group { return rules.MustParse(text) }

func TestGzipFileByMagic(t *testing.T) {
	t.Parallel()
	p := writeLog(t, "plain.gz", []req{{t: t0, ip: "192.0.2.1", path: "/", status: 200}}, req.clf)
	q := filepath.Join(t.TempDir(), "renamed")
	data, _ := os.ReadFile(p)
	os.WriteFile(q, data, 0o600)
	rep, err := runText(t, Config{Routes: []RouteRules{{Text: "ip:5/s"}}, Inputs: []Input{{Name: q}}})
	if err != nil || rep.Requests != 1 {
		t.Fatalf("rep %+v err %v", rep, err)
	}
}

// TestProgressAndPrefix prints progress lines on a long enough log, and
// groups IPv6 clients by the prefix given.
func TestProgressAndPrefix(t *testing.T) {
	t.Parallel()
	var b, progress strings.Builder
	for i := range 5000 {
		b.WriteString(req{t: t0.Add(time.Duration(i) * time.Second), ip: fmt.Sprintf("2001:db8:0:%x::1", i%2), path: "/", status: 200}.clf())
	}
	log := b.String()
	rep, err := runText(t, Config{Routes: []RouteRules{{Text: "ip:5/s"}}, Inputs: []Input{{Name: "-", R: strings.NewReader(log)}},
		IPv6Prefix: 48, Progress: &progress, ProgressEvery: time.Nanosecond})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Subjects) != 1 || rep.Subjects[0].Subject != "ip:2001:db8::/48" {
		t.Errorf("subjects %v, want one /48", rep.Subjects)
	}
	if !strings.Contains(progress.String(), "lines/s") {
		t.Errorf("no progress line: %q", progress.String())
	}
	// From a file, progress says how much of the input was read.
	progress.Reset()
	p := filepath.Join(t.TempDir(), "a.log")
	os.WriteFile(p, []byte(log), 0o600)
	if _, err := runText(t, Config{Routes: []RouteRules{{Text: "ip:5/s"}}, Inputs: []Input{{Name: p}},
		Progress: &progress, ProgressEvery: time.Nanosecond}); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(progress.String(), "% of the input") {
		t.Errorf("no share of the input in %q", progress.String())
	}
}

// TestUnknownStatements finds set fields of the rule model that the
// in-process decider does not model, so that statements the rule
// language gains send their routes to the engine's script.
func TestUnknownStatements(t *testing.T) {
	t.Parallel()
	g := rules.MustParse("ip:5/s,100/10min~1min; user[bytes]:1000/h; block:1m; count:2xx; scope:s; mode:shadow")
	if r, w := unknownStatements(&g); len(r)+len(w) != 0 {
		t.Errorf("known statements reported unknown: %v %v", r, w)
	}
	type window struct {
		rules.Window
		Calendar string
	}
	if u := unknownFields(reflect.ValueOf(window{Calendar: "month"}), "Window", knownWindow); !slices.Equal(u, []string{"Window.Calendar"}) {
		t.Errorf("unknown fields %v, want Window.Calendar", u)
	}
}

// TestServeMuxChoices: HEAD goes to a GET pattern, the most specific
// pattern wins, and a request ServeMux would redirect is not counted.
func TestServeMuxChoices(t *testing.T) {
	t.Parallel()
	line := func(method, target string) string {
		return "192.0.2.1 - - [25/Nov/2026:10:00:00 +0000] \"" + method + " " + target + " HTTP/1.1\" 200 5\n"
	}
	log := line("HEAD", "/files/1") + line("GET", "/files/special") + line("GET", "/dir") + line("POST", "/files/1") + line("GET", "/dir/x")
	rr, err := ParseRulesFile("r", strings.NewReader("GET /files/{id} ip:100/s\nGET /files/special ip:100/s\n/dir/ ip:100/s\n"))
	if err != nil {
		t.Fatal(err)
	}
	var routes []string
	rep, err := runText(t, Config{Routes: rr, Inputs: []Input{{Name: "-", R: strings.NewReader(log)}},
		OnDecision: func(r Record, _ bool) { routes = append(routes, r.Method+" "+r.Target) }})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Unmatched != 2 || !slices.Equal(routes, []string{"HEAD /files/1", "GET /files/special", "GET /dir/x"}) {
		t.Errorf("unmatched %d, replayed %v", rep.Unmatched, routes)
	}
	perRoute := map[string]int64{}
	for _, p := range rep.Policies {
		perRoute[p.Route] = p.Requests
	}
	if perRoute["GET /files/{id}"] != 1 || perRoute["GET /files/special"] != 1 || perRoute["/dir/"] != 1 {
		t.Errorf("requests per route %v", perRoute)
	}
}
