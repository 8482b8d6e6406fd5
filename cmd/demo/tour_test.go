package main

import (
	"context"
	"log/slog"
	"net/http/httptest"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// tourStep is one command of docs/tour.md and the output the page shows
// for it.
type tourStep struct {
	cmd  string
	want []string
	// joined: the page shows the output as # comments of a sh block,
	// wrapped for reading; it is compared with line breaks and leading
	// spaces removed. Otherwise the page's lines must appear in the
	// output in order ("..." marks lines the page leaves out).
	joined bool
}

// tourPage is the page whose outputs TestTour keeps true.
const tourPage = "../../docs/tour.md"

// notRun are the commands of the tour TestTour does not run, each with
// its reason: starting the demo (TestTour serves its handler itself), the
// load generator (its counts depend on timing; the tour shows it after
// the operator page, whose top list counts every denial), the rule-override
// block with its own Redis and two demo processes (TestTourTwoProcesses
// runs it as a whole), the screenshot (it needs Chromium), and pauses.
var notRun = regexp.MustCompile(`^go run \./cmd/demo( |$)|\$RP|\$P[12]|^read RP|^kill %|^cd contrib && go run \./internal/screenshot|^sleep [0-9.]+ `)

// TestTour runs every command of docs/tour.md against the demo's handler,
// served in-process on a fresh embedded miniredis, in the page's order (the
// page says its outputs are those of a freshly started demo), with bash and
// curl, and compares each output with the one the page shows. Numbers with
// a fraction (the seconds until a reset) and the bytes of the abandoned
// stream (socket buffers) vary between runs and are compared as such.
func TestTour(t *testing.T) {
	t.Parallel()
	for _, tool := range []string{"bash", "curl"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("TestTour needs %s: %v", tool, err)
		}
	}
	page, err := os.ReadFile(tourPage)
	if err != nil {
		t.Fatal(err)
	}
	steps := tourSteps(string(page))
	b, err := openBackend(context.Background(), "", "")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.close)
	d, err := newServer(b, slog.New(slog.DiscardHandler), testTimeout)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.lim.Close() })
	srv := httptest.NewServer(d.handler)
	t.Cleanup(srv.Close)

	ran := 0
	for _, s := range steps {
		if !strings.Contains(s.cmd, "http://127.0.0.1:8080") || notRun.MatchString(s.cmd) {
			if !notRun.MatchString(s.cmd) {
				t.Errorf("the tour has a command TestTour neither runs nor knows to leave out: %s", s.cmd)
			}
			continue
		}
		ran++
		// The denial tallies reach Redis about once a second: the top
		// list is read again until it shows them, for 15 s at most.
		var got string
		for start := time.Now(); ; time.Sleep(100 * time.Millisecond) {
			cmd := exec.Command("bash", "-c", strings.ReplaceAll(s.cmd, "http://127.0.0.1:8080", srv.URL))
			cmd.Dir = "../.."
			out, err := cmd.Output()
			if err != nil {
				t.Fatalf("%s: %v", s.cmd, err)
			}
			got = normalize(s.cmd, string(out))
			if !strings.Contains(s.cmd, "api/top?") || time.Since(start) > 15*time.Second ||
				sameOutput(unwrap(got), normalize(s.cmd, unwrap(strings.Join(s.want, "\n")))) {
				break
			}
		}
		if s.joined {
			if want := normalize(s.cmd, unwrap(strings.Join(s.want, "\n"))); !sameOutput(unwrap(got), want) {
				t.Errorf("%s\n got: %s\nwant: %s", s.cmd, unwrap(got), want)
			}
			continue
		}
		if missing := subsequence(strings.Split(got, "\n"), s.want, s.cmd); missing != "" {
			t.Errorf("%s\noutput lacks %q (in the page's order):\n%s", s.cmd, missing, got)
		}
	}
	if ran < 15 {
		t.Errorf("ran %d commands of the tour; the page has more", ran)
	}
}

// tourSteps reads the commands of page's code blocks: "$ " lines of a
// plain block, followed by their output; and the lines of a sh block,
// followed by their output as "# " comments.
func tourSteps(page string) []tourStep {
	var steps []tourStep
	var in, sh bool
	for line := range strings.Lines(page) {
		line = strings.TrimRight(line, "\n")
		if strings.HasPrefix(line, "```") {
			in, sh = !in, line == "```sh"
			continue
		}
		if !in {
			continue
		}
		last := len(steps) - 1
		switch {
		case strings.HasPrefix(line, "$ "):
			steps = append(steps, tourStep{cmd: line[2:]})
		case sh && strings.HasPrefix(line, "#"):
			if last >= 0 {
				steps[last].want = append(steps[last].want, strings.TrimPrefix(line, "#"))
			}
		case sh && last >= 0 && strings.HasSuffix(steps[last].cmd, "\\"):
			steps[last].cmd += "\n" + line // a continued command
		case sh:
			steps = append(steps, tourStep{cmd: line, joined: true})
		case last >= 0:
			steps[last].want = append(steps[last].want, line)
		}
	}
	return steps
}

var (
	fraction = regexp.MustCompile(`\d+\.\d+`)
	streamed = regexp.MustCompile(`"used":\d+,"remaining":\d+`)
	// calendarT is a calendar window's t: the time to the end of the
	// month in Shanghai, which depends on the day the tour runs.
	calendarT = regexp.MustCompile(`(-calendar-(?:day|week|month)";r=\d+;t=)\d+`)
)

// normalize replaces what varies between runs by placeholders.
func normalize(cmd, s string) string {
	s = fraction.ReplaceAllString(s, "N.N")
	s = calendarT.ReplaceAllString(s, "${1}T")
	if strings.Contains(cmd, "scope=streams") {
		s = streamed.ReplaceAllString(s, `"used":U,"remaining":R`)
	}
	return s
}

// resets are the whole seconds to a window's reset (t=, Retry-After):
// they count down while the tour runs, so a reader (or a loaded machine)
// that takes a second longer between two commands sees one less.
var resets = regexp.MustCompile(`(;t=|Retry-After: |retry after )(\d+)`)

// sameOutput reports whether got matches want, every t= within 2 s.
func sameOutput(got, want string) bool {
	if resets.ReplaceAllString(got, "$1") != resets.ReplaceAllString(want, "$1") {
		return false
	}
	gs, ws := resets.FindAllStringSubmatch(got, -1), resets.FindAllStringSubmatch(want, -1)
	for i := range gs {
		g, _ := strconv.Atoi(gs[i][2])
		w, _ := strconv.Atoi(ws[i][2])
		if g < w-2 || g > w+2 {
			return false
		}
	}
	return true
}

// unwrap removes line breaks and the spaces that start lines.
func unwrap(s string) string {
	var b strings.Builder
	for line := range strings.Lines(s) {
		b.WriteString(strings.TrimSpace(line))
	}
	return b.String()
}

// subsequence returns the first line of want that does not appear in got
// after the previous one, or "" when all do.
func subsequence(got, want []string, cmd string) string {
	i := 0
	for _, w := range want {
		if w == "..." {
			continue
		}
		w = normalize(cmd, w)
		for i < len(got) && !sameOutput(strings.TrimRight(got[i], " \r"), w) {
			i++
		}
		if i == len(got) {
			return w
		}
		i++
	}
	return ""
}
