package middleware_test

import (
	"encoding/base64"
	"errors"
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"testing"
)

// This file holds a small strict parser for the Structured Field Values of
// RFC 9651 (List and Dictionary of Items with Parameters; no Inner Lists,
// Dates or Display Strings, which the RateLimit fields never use), so that
// tests check the fields the way a conforming client parses them rather
// than by string comparison.

type sfParam struct {
	Key   string
	Value any // int64, float64 (Decimal), string (String), sfToken, []byte, bool
}

type sfToken string

type sfItem struct {
	Value  any
	Params []sfParam
}

// param returns the value of the parameter named key.
func (it sfItem) param(key string) (any, bool) {
	for _, p := range it.Params {
		if p.Key == key {
			return p.Value, true
		}
	}
	return nil, false
}

type sfMember struct {
	Key string
	sfItem
}

type sfParser struct {
	s string
	i int
}

var errSF = errors.New("sf: parse error")

func (p *sfParser) fail(format string, args ...any) error {
	return fmt.Errorf("%w at %d in %q: %s", errSF, p.i, p.s, fmt.Sprintf(format, args...))
}

func (p *sfParser) eof() bool  { return p.i >= len(p.s) }
func (p *sfParser) peek() byte { return p.s[p.i] }

func (p *sfParser) skipSP() {
	for !p.eof() && p.peek() == ' ' {
		p.i++
	}
}

func (p *sfParser) skipOWS() {
	for !p.eof() && (p.peek() == ' ' || p.peek() == '\t') {
		p.i++
	}
}

// parseSFList parses field lines as an sf-list (RFC 9651, Section 4.2.1);
// several lines are combined with ", " as Section 4.2 requires.
func parseSFList(lines ...string) ([]sfItem, error) {
	p := &sfParser{s: strings.Trim(strings.Join(lines, ", "), " ")}
	var out []sfItem
	for !p.eof() {
		it, err := p.item()
		if err != nil {
			return nil, err
		}
		out = append(out, it)
		if err := p.listSep(); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// parseSFDict parses field lines as an sf-dictionary (Section 4.2.2).
func parseSFDict(lines ...string) ([]sfMember, error) {
	p := &sfParser{s: strings.Trim(strings.Join(lines, ", "), " ")}
	var out []sfMember
	for !p.eof() {
		k, err := p.key()
		if err != nil {
			return nil, err
		}
		m := sfMember{Key: k}
		if !p.eof() && p.peek() == '=' {
			p.i++
			if m.sfItem, err = p.item(); err != nil {
				return nil, err
			}
		} else {
			m.Value = true
			if m.Params, err = p.params(); err != nil {
				return nil, err
			}
		}
		// A repeated key overwrites the earlier value in place.
		replaced := false
		for i := range out {
			if out[i].Key == k {
				out[i], replaced = m, true
			}
		}
		if !replaced {
			out = append(out, m)
		}
		if err := p.listSep(); err != nil {
			return nil, err
		}
	}
	return out, nil
}

func (p *sfParser) listSep() error {
	p.skipOWS()
	if p.eof() {
		return nil
	}
	if p.peek() != ',' {
		return p.fail("expected ','")
	}
	p.i++
	p.skipOWS()
	if p.eof() {
		return p.fail("trailing comma")
	}
	return nil
}

func (p *sfParser) item() (sfItem, error) {
	v, err := p.bareItem()
	if err != nil {
		return sfItem{}, err
	}
	ps, err := p.params()
	return sfItem{Value: v, Params: ps}, err
}

func (p *sfParser) params() ([]sfParam, error) {
	var ps []sfParam
	for !p.eof() && p.peek() == ';' {
		p.i++
		p.skipSP()
		k, err := p.key()
		if err != nil {
			return nil, err
		}
		var v any = true
		if !p.eof() && p.peek() == '=' {
			p.i++
			if v, err = p.bareItem(); err != nil {
				return nil, err
			}
		}
		replaced := false
		for i := range ps {
			if ps[i].Key == k {
				ps[i].Value, replaced = v, true
			}
		}
		if !replaced {
			ps = append(ps, sfParam{k, v})
		}
	}
	return ps, nil
}

func isLCAlpha(c byte) bool { return c >= 'a' && c <= 'z' }
func isDigit(c byte) bool   { return c >= '0' && c <= '9' }
func isAlpha(c byte) bool   { return isLCAlpha(c) || c >= 'A' && c <= 'Z' }

func isTChar(c byte) bool {
	return isAlpha(c) || isDigit(c) || strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0
}

func (p *sfParser) key() (string, error) {
	if p.eof() || !(isLCAlpha(p.peek()) || p.peek() == '*') {
		return "", p.fail("expected key")
	}
	start := p.i
	for !p.eof() {
		c := p.peek()
		if !(isLCAlpha(c) || isDigit(c) || c == '_' || c == '-' || c == '.' || c == '*') {
			break
		}
		p.i++
	}
	return p.s[start:p.i], nil
}

func (p *sfParser) bareItem() (any, error) {
	if p.eof() {
		return nil, p.fail("expected bare item")
	}
	switch c := p.peek(); {
	case c == '-' || isDigit(c):
		return p.number()
	case c == '"':
		return p.str()
	case c == '*' || isAlpha(c):
		start := p.i
		p.i++
		for !p.eof() && (isTChar(p.peek()) || p.peek() == ':' || p.peek() == '/') {
			p.i++
		}
		return sfToken(p.s[start:p.i]), nil
	case c == ':':
		end := strings.IndexByte(p.s[p.i+1:], ':')
		if end < 0 {
			return nil, p.fail("unterminated byte sequence")
		}
		b, err := base64.StdEncoding.DecodeString(p.s[p.i+1 : p.i+1+end])
		if err != nil {
			return nil, p.fail("bad base64: %v", err)
		}
		p.i += end + 2
		return b, nil
	case c == '?':
		if p.i+1 >= len(p.s) || (p.s[p.i+1] != '0' && p.s[p.i+1] != '1') {
			return nil, p.fail("bad boolean")
		}
		p.i += 2
		return p.s[p.i-1] == '1', nil
	}
	return nil, p.fail("unexpected %q", p.peek())
}

func (p *sfParser) number() (any, error) {
	start := p.i
	if p.peek() == '-' {
		p.i++
	}
	digits := p.i
	if p.eof() || !isDigit(p.peek()) {
		return nil, p.fail("expected digit")
	}
	dot := -1
	for !p.eof() && (isDigit(p.peek()) || p.peek() == '.' && dot < 0) {
		if p.peek() == '.' {
			dot = p.i
		}
		p.i++
	}
	num := p.s[start:p.i]
	if dot < 0 {
		if p.i-digits > 15 {
			return nil, p.fail("integer has more than 15 digits")
		}
		n, err := strconv.ParseInt(num, 10, 64)
		if err != nil {
			return nil, p.fail("%v", err)
		}
		return n, nil
	}
	if dot-digits > 12 {
		return nil, p.fail("decimal integer part has more than 12 digits")
	}
	if frac := p.i - dot - 1; frac < 1 || frac > 3 {
		return nil, p.fail("decimal needs 1 to 3 fraction digits")
	}
	f, err := strconv.ParseFloat(num, 64)
	if err != nil {
		return nil, p.fail("%v", err)
	}
	return f, nil
}

func (p *sfParser) str() (string, error) {
	p.i++ // opening quote
	var b strings.Builder
	for !p.eof() {
		c := p.peek()
		p.i++
		switch {
		case c == '\\':
			if p.eof() || (p.peek() != '"' && p.peek() != '\\') {
				return "", p.fail("bad escape")
			}
			b.WriteByte(p.peek())
			p.i++
		case c == '"':
			return b.String(), nil
		case c < 0x20 || c > 0x7e:
			return "", p.fail("non-printable byte in string")
		default:
			b.WriteByte(c)
		}
	}
	return "", p.fail("unterminated string")
}

func TestSFParser(t *testing.T) {
	t.Parallel()
	lists := []struct {
		in   string
		want []sfItem
	}{
		{`"default";q=100;w=10`, []sfItem{{"default", []sfParam{{"q", int64(100)}, {"w", int64(10)}}}}},
		{`"a";r=0;t=1, "b";r=5`, []sfItem{
			{"a", []sfParam{{"r", int64(0)}, {"t", int64(1)}}},
			{"b", []sfParam{{"r", int64(5)}}}}},
		{`tok;x;y=?0;pk=:AQI=:,-1.5`, []sfItem{
			{sfToken("tok"), []sfParam{{"x", true}, {"y", false}, {"pk", []byte{1, 2}}}},
			{-1.5, nil}}},
		{`"q\"\\"`, []sfItem{{`q"\`, nil}}},
		{`"a";q=1;q=2`, []sfItem{{"a", []sfParam{{"q", int64(2)}}}}},
	}
	for _, tt := range lists {
		t.Run(tt.in, func(t *testing.T) {
			t.Parallel()
			got, err := parseSFList(tt.in)
			if err != nil || !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("parseSFList(%q) = %#v, %v; want %#v", tt.in, got, err, tt.want)
			}
		})
	}
	bad := []string{
		`"a",`, `"a" "b"`, `"a";Q=1`, `"unterminated`, `"a";q=1234567890123456`,
		`"a";q=1.2345`, `"\x"`, "\"tab\there\"", `"a";=1`, `,`, `"a",,"b"`,
	}
	for _, in := range bad {
		t.Run("bad "+in, func(t *testing.T) {
			t.Parallel()
			if got, err := parseSFList(in); err == nil {
				t.Fatalf("parseSFList(%q) = %#v, want error", in, got)
			}
		})
	}
	d, err := parseSFDict(`a=1, b;x, a=3`)
	want := []sfMember{{"a", sfItem{int64(3), nil}}, {"b", sfItem{true, []sfParam{{"x", true}}}}}
	if err != nil || !reflect.DeepEqual(d, want) {
		t.Fatalf("parseSFDict = %#v, %v; want %#v", d, err, want)
	}
}
