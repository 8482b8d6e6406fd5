package muxpattern

import (
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
)

func TestParse(t *testing.T) {
	t.Parallel()
	tests := []struct {
		pattern string
		want    []string
		off     int // offset of the error, or -1 for none
	}{
		{"/", nil, -1},
		{"GET /files/{id}", []string{"id"}, -1},
		{"GET example.com/{org}/{repo}/{path...}", []string{"org", "repo", "path"}, -1},
		{"/a/{$}", nil, -1},
		{"POST /{ä}/{_x1}", []string{"ä", "_x1"}, -1},
		{" /{id}", []string{"id"}, -1}, // an empty method, as ServeMux allows
		{"GET \t /{id}", []string{"id"}, -1},
		{"", nil, 0},
		{"GET /{", nil, 5},
		{"GET /a/{id}x", nil, 7},
		{"GET /{a}/{a}", nil, 9},
		{"GET /{a...}/b", nil, 5},
		{"GET /{1a}", nil, 5},
		{"G@T /a", nil, 0},
		{"GET a{b}/c", nil, 5},
		{"GET /a/../b", nil, 4},
	}
	for _, tt := range tests {
		got, off, reason := Parse(tt.pattern)
		if tt.off < 0 {
			if reason != "" || !slices.Equal(got, tt.want) {
				t.Errorf("Parse(%q) = %q, %q; want %q", tt.pattern, got, reason, tt.want)
			}
			continue
		}
		if reason == "" || off != tt.off || got != nil {
			t.Errorf("Parse(%q) = %q, %d, %q; want an error at offset %d", tt.pattern, got, off, reason, tt.off)
		}
	}
}

// FuzzParse checks that Parse accepts exactly the patterns http.ServeMux
// accepts, and finds the names PathValue serves.
func FuzzParse(f *testing.F) {
	for _, s := range []string{
		"/", "GET /files/{id}", "GET example.com/{a}/{b...}", "/a/{$}", "POST /{ä}/{_x1}",
		"", "GET /{", "GET /a/{id}x", "GET /{a}/{a}", "GET /{a...}/b", "GET /{1a}", "G@T /a",
		"GET a{b}/c", "GET /a/../b", "CONNECT /a/../b", "GET\t /x", "GET  /x", " /x", "/{$}/x", "/{...}",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, pattern string) {
		names, off, reason := Parse(pattern)
		var panicked any
		func() {
			defer func() { panicked = recover() }()
			http.NewServeMux().Handle(pattern, http.NotFoundHandler())
		}()
		if (reason == "") != (panicked == nil) {
			t.Fatalf("Parse(%q) = %q, %q; ServeMux.Handle panicked with %v", pattern, names, reason, panicked)
		}
		if reason != "" {
			if off < 0 || off > len(pattern) {
				t.Fatalf("Parse(%q) error %q at offset %d", pattern, reason, off)
			}
			if msg := fmt.Sprint(panicked); strings.Contains(msg, ": at offset ") &&
				!strings.Contains(msg, fmt.Sprintf(": at offset %d: ", off)) {
				t.Fatalf("Parse(%q) = %q at %d; ServeMux says %s", pattern, reason, off, msg)
			}
		}
	})
}
