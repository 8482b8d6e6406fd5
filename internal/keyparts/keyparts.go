// Package keyparts writes and reads the parts of Redis keys as package
// engine does. Escaping writes '%', '{', '}', '|', ':', '#', space, DEL
// and control bytes as '%' and two upper-case hex digits. A hashed
// subject is stored as its hash: "#" and 43 base64url characters.
package keyparts

import (
	"strconv"
	"strings"
)

var escaped = func() (t [256]bool) {
	for c := range 0x21 {
		t[c] = true
	}
	for _, c := range "%{}|:#\x7f" {
		t[c] = true
	}
	return t
}()

const hexDigits = "0123456789ABCDEF"

// AppendEscaped appends s to b, escaped.
func AppendEscaped(b []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if escaped[c] {
			b = append(b, '%', hexDigits[c>>4], hexDigits[c&15])
		} else {
			b = append(b, c)
		}
	}
	return b
}

// Unescape reverses AppendEscaped; it reports false for a malformed escape.
func Unescape(s string) (string, bool) {
	if !strings.Contains(s, "%") {
		return s, true
	}
	b := make([]byte, 0, len(s))
	for i := 0; i < len(s); i++ {
		if s[i] != '%' {
			b = append(b, s[i])
			continue
		}
		if i+2 >= len(s) {
			return "", false
		}
		v, err := strconv.ParseUint(s[i+1:i+3], 16, 8)
		if err != nil {
			return "", false
		}
		b = append(b, byte(v))
		i += 2
	}
	return string(b), true
}

// IsStoredHash reports whether s has the form of a stored hash: "#" and 43
// base64url characters, as the denial tallies report a hashed subject.
func IsStoredHash(s string) bool {
	if len(s) != 1+43 || s[0] != '#' {
		return false
	}
	for i := 1; i < len(s); i++ {
		c := s[i]
		if !('A' <= c && c <= 'Z' || 'a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '-' || c == '_') {
			return false
		}
	}
	return true
}
