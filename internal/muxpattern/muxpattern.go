// Package muxpattern checks http.ServeMux patterns as net/http's parser
// does, without a ServeMux, so that a bad pattern is reported with its
// offset instead of a panic. It imports nothing of this module.
package muxpattern

import (
	"path"
	"slices"
	"strconv"
	"strings"
	"unicode"
)

// Parse checks a ServeMux pattern as net/http's parser does and returns
// its wildcard names in order. On error it returns the offset and reason.
func Parse(s string) (wildcards []string, off int, reason string) {
	if s == "" {
		return nil, 0, "empty route pattern"
	}
	method, rest := "", s
	if i := strings.IndexAny(s, " \t"); i >= 0 {
		method, rest = s[:i], strings.TrimLeft(s[i+1:], " \t")
		if method != "" && !ValidToken(method) {
			return nil, 0, "invalid method " + strconv.Quote(method)
		}
		off = len(method) + 1 // as net/http counts, extra blanks not included
	}
	i := strings.IndexByte(rest, '/')
	if i < 0 {
		return nil, off, "host/path missing /"
	}
	if j := strings.IndexByte(rest[:i], '{'); j >= 0 {
		return nil, off + j, "host contains '{' (missing initial '/'?)"
	}
	off += i
	rest = rest[i:]
	if method != "" && method != "CONNECT" && rest != cleanPath(rest) {
		return nil, off, "non-CONNECT pattern with unclean path can never match"
	}
	for len(rest) > 0 {
		rest = rest[1:] // the '/'
		off = len(s) - len(rest)
		i := strings.IndexByte(rest, '/')
		if i < 0 {
			i = len(rest)
		}
		var seg string
		seg, rest = rest[:i], rest[i:]
		j := strings.IndexByte(seg, '{')
		switch {
		case j < 0:
			continue
		case j != 0:
			return nil, off, "bad wildcard segment (must start with '{')"
		case seg[len(seg)-1] != '}':
			return nil, off, "bad wildcard segment (must end with '}')"
		}
		name := seg[1 : len(seg)-1]
		if name == "$" {
			if rest != "" {
				return nil, off, "{$} not at end"
			}
			break
		}
		name, multi := strings.CutSuffix(name, "...")
		switch {
		case multi && rest != "":
			return nil, off, "{...} wildcard not at end"
		case name == "":
			return nil, off, "empty wildcard"
		case !isWildcardName(name):
			return nil, off, "bad wildcard name " + strconv.Quote(name)
		case slices.Contains(wildcards, name):
			return nil, off, "duplicate wildcard name " + strconv.Quote(name)
		}
		wildcards = append(wildcards, name)
	}
	return wildcards, 0, ""
}

// isWildcardName is net/http's rule: a Go identifier, Unicode letters
// included.
func isWildcardName(s string) bool {
	if s == "" {
		return false
	}
	for i, c := range s {
		if !unicode.IsLetter(c) && c != '_' && (i == 0 || !unicode.IsDigit(c)) {
			return false
		}
	}
	return true
}

// cleanPath is net/http's: path.Clean that keeps a trailing slash.
func cleanPath(p string) string {
	if p == "" {
		return "/"
	}
	if p[0] != '/' {
		p = "/" + p
	}
	np := path.Clean(p)
	if p[len(p)-1] == '/' && np != "/" {
		if len(p) == len(np)+1 && strings.HasPrefix(p, np) {
			np = p
		} else {
			np += "/"
		}
	}
	return np
}

// ValidToken reports whether s is an RFC 9110 token, the syntax of a header
// field name.
func ValidToken(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z') && !('0' <= c && c <= '9') && !strings.ContainsRune("!#$%&'*+-.^_`|~", rune(c)) {
			return false
		}
	}
	return true
}
