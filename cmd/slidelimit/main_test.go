package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const sampleLog = `203.0.113.7 - alice [26/Nov/2026:10:00:00 +0000] "GET /files/1 HTTP/1.1" 200 512 "-" "curl/8"
203.0.113.7 - - [26/Nov/2026:10:00:00 +0000] "GET /files/2 HTTP/1.1" 200 -
203.0.113.7 - - [26/Nov/2026:10:00:00 +0000] "GET /files/3 HTTP/1.1" 200 10
203.0.113.9 - - [26/Nov/2026:10:00:01 +0000] "GET /other HTTP/1.1" 200 10
not a line
`

func cmd(t *testing.T, stdin string, args ...string) (int, string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	code := run(context.Background(), args, strings.NewReader(stdin), &out, &errb)
	return code, out.String(), errb.String()
}

// TestReplayJSON checks the -json shape exactly.
func TestReplayJSON(t *testing.T) {
	t.Parallel()
	code, out, errs := cmd(t, sampleLog, "replay", "-q", "-json", "-rules", "ip:2/s; user:5/s", "-route", "GET /files/{id}", "-")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	var top map[string]json.RawMessage
	if err := json.Unmarshal([]byte(out), &top); err != nil {
		t.Fatal(err)
	}
	if len(top) != 4 || top["requests"] == nil || top["denied"] == nil || top["subjects"] == nil || top["policies"] == nil {
		t.Fatalf("keys of %s", out)
	}
	var rep struct {
		Requests, Denied int
		Subjects         []map[string]any
	}
	json.Unmarshal([]byte(out), &rep)
	if rep.Requests != 3 || rep.Denied != 1 {
		t.Errorf("requests %d denied %d, want 3 1", rep.Requests, rep.Denied)
	}
	want := []map[string]any{
		{"subject": "ip:203.0.113.7", "requests": 3.0, "denied": 1.0},
		{"subject": "user:alice", "requests": 1.0, "denied": 0.0},
	}
	if len(rep.Subjects) != 2 || !equal(rep.Subjects[0], want[0]) || !equal(rep.Subjects[1], want[1]) {
		t.Errorf("subjects %v, want %v", rep.Subjects, want)
	}
	for _, s := range []string{"1 requests matched no route", "1 unparseable lines", "stdin:5: replay: unparseable line"} {
		if !strings.Contains(errs, s) {
			t.Errorf("stderr lacks %q:\n%s", s, errs)
		}
	}
}

func equal(a, b map[string]any) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

// TestReplayExitCodes: an empty log or one without a parseable line
// exits 2, as do bad rules (with the rule language's position).
func TestReplayExitCodes(t *testing.T) {
	t.Parallel()
	if code, _, errs := cmd(t, "", "replay", "-rules", "ip:5/s", "-"); code != 2 || !strings.Contains(errs, "no parseable log line") {
		t.Errorf("empty: exit %d %s", code, errs)
	}
	if code, _, errs := cmd(t, "junk\n", "replay", "-rules", "ip:5/s", "-"); code != 2 || !strings.Contains(errs, "no parseable log line") {
		t.Errorf("junk: exit %d %s", code, errs)
	}
	if code, _, errs := cmd(t, sampleLog, "replay", "-rules", "ip:5/q", "-"); code != 2 || !strings.Contains(errs, "-rules") {
		t.Errorf("bad rules: exit %d %s", code, errs)
	}
	if code, _, errs := cmd(t, "", "replay", "-rules", "ip:5/s", "/nonexistent/access.log"); code != 1 || !strings.Contains(errs, "no such file") {
		t.Errorf("missing file: exit %d %s", code, errs)
	}
	if code, _, errs := cmd(t, sampleLog, "replay", "-rules", "header(X-Key):5/s", "-"); code != 2 || !strings.Contains(errs, "cannot be replayed") {
		t.Errorf("header: exit %d %s", code, errs)
	}
}

// TestReplayHTMLAndFile writes the HTML report from a gzip-free file with
// a rules file, and checks it is self-contained.
func TestReplayHTMLAndFile(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	logf, rulesf, htmlf := filepath.Join(dir, "access.log"), filepath.Join(dir, "rules.txt"), filepath.Join(dir, "r.html")
	os.WriteFile(logf, []byte(sampleLog), 0o600)
	os.WriteFile(rulesf, []byte("GET /files/{id} ip:2/s\nGET /other ip:1/s\n"), 0o600)
	code, out, errs := cmd(t, "", "replay", "-q", "-rules-file", rulesf, "-html", htmlf, logf)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	if !strings.Contains(out, "4 requests replayed") || !strings.Contains(out, "ip-1s") {
		t.Errorf("text report:\n%s", out)
	}
	page, err := os.ReadFile(htmlf)
	if err != nil {
		t.Fatal(err)
	}
	h := string(page)
	if !strings.Contains(h, "<svg") || !strings.Contains(h, "denied") || strings.Contains(h, "src=") || strings.Contains(h, "href=") {
		t.Errorf("HTML report not self-contained or lacks the chart")
	}
}

// TestReplayHostileLine: control characters a log's writer put in its
// fields, or in a file's name, reach neither the text report nor standard
// error nor the HTML page raw: they are escaped (\x1b, \a), as JSON
// escapes them.
func TestReplayHostileLine(t *testing.T) {
	t.Parallel()
	evil := "\x1b[2J\x1b]0;PWN\a"
	line := evil + ` - u` + "\u009b31m\x7f" + ` [26/Nov/2026:10:00:00 +0000] "GET /x HTTP/1.1" 200 1 "-" "` + evil + `"` + "\n"
	log := line + line + evil + " not a line\n" + `1.2.3.4 - - [26/Nov/2026:10:00:00 +0000] "GET /x HTTP/1.1" 999 1` + "\n"
	dir := t.TempDir()
	name := filepath.Join(dir, "access"+evil+".log")
	if err := os.WriteFile(name, []byte(log), 0o644); err != nil {
		t.Fatal(err)
	}
	raw := func(s string) bool {
		for _, r := range s {
			if r < 0x20 && r != '\n' || r >= 0x7f && r <= 0x9f {
				return true
			}
		}
		return false
	}
	page := filepath.Join(dir, "r.html")
	code, out, errs := cmd(t, "", "replay", "-q", "-rules", "ip:1/min; user:1/min", "-html", page, name)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	html, err := os.ReadFile(page)
	if err != nil {
		t.Fatal(err)
	}
	if raw(string(html)) || !strings.Contains(string(html), `peer:\x1b[2J\x1b]0;PWN\a`) {
		t.Errorf("the HTML page holds the subject raw or not at all:\n%q", html)
	}
	for _, s := range []string{`peer:\x1b[2J\x1b]0;PWN\a`, `user:u\u009b31m\x7f`} {
		if !strings.Contains(out, s) {
			t.Errorf("the report lacks %s:\n%s", s, out)
		}
	}
	if !strings.Contains(errs, `access\x1b[2J\x1b]0;PWN\a.log:3: replay: unparseable line`) {
		t.Errorf("stderr lacks the bad line, escaped:\n%s", errs)
	}
	if raw(out) || raw(errs) {
		t.Errorf("control characters reach the output raw:\nstdout %q\nstderr %q", out, errs)
	}
	// An error names the file escaped as well.
	code, _, errs = cmd(t, "", "replay", "-q", "-rules", "ip:1/min", filepath.Join(dir, "gone"+evil+".log"))
	if code == 0 || !strings.Contains(errs, `gone\x1b[2J\x1b]0;PWN\a.log`) || raw(errs) {
		t.Errorf("exit %d, stderr %q: want an error naming the file escaped", code, errs)
	}
}

// TestReplayLongLine: a line over the cap (replay.MaxLine, 1 MiB) is
// rejected with a message naming it and the cap; the other lines replay.
func TestReplayLongLine(t *testing.T) {
	t.Parallel()
	ok := `1.2.3.4 - - [26/Nov/2026:10:00:00 +0000] "GET /x HTTP/1.1" 200 1` + "\n"
	code, out, errs := cmd(t, ok+strings.Repeat("x", 2<<20)+"\n"+ok, "replay", "-q", "-rules", "ip:5/s", "-")
	if code != 0 || !strings.HasPrefix(out, "2 requests replayed") {
		t.Fatalf("exit %d, stdout %q, stderr %q", code, out, errs)
	}
	if !strings.Contains(errs, "stdin:2: replay: unparseable line: longer than 1048576 bytes") {
		t.Errorf("stderr lacks the long line:\n%s", errs)
	}
}
