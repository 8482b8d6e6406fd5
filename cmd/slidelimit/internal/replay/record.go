package replay

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Record is one request of an access log: what a replay needs of a line.
type Record struct {
	// Time is when the log says the request happened, in microseconds since
	// 1970 (the engine's unit).
	Time int64
	// IP is the client address field, as logged.
	IP string
	// User is the authenticated user; empty for anonymous ("-").
	User string
	// Method and Target are the request line's method and request target
	// (path and query).
	Method, Target string
	// Status is the response status.
	Status int
	// Bytes is the response size; 0 when the log says "-".
	Bytes int64
	// File is the index of the input the line came from, Line its line
	// number (1-based).
	File, Line int

	size int64 // what the reorder buffer counts for it (see MaxReorder)
}

// Format is the syntax of an access log.
type Format int

// Formats. Common and Combined are told apart per line (Combined adds the
// referer and user agent), so both are parsed by the CLF parser.
const (
	// CLF is the NCSA Common or Combined Log Format of Apache and nginx:
	//	host ident authuser [dd/Mon/yyyy:HH:MM:SS zone] "request" status bytes ["referer" "user-agent"]
	CLF Format = iota + 1
	// JSONLines is one JSON object per line, read with a Fields mapping.
	JSONLines
)

func (f Format) String() string {
	switch f {
	case CLF:
		return "NCSA Common/Combined"
	case JSONLines:
		return "JSON lines"
	}
	return "unknown"
}

// detect tells a log's format from its first non-blank line: a JSON object
// or CLF.
func detect(line []byte) Format {
	if b := bytes.TrimSpace(line); len(b) > 0 && b[0] == '{' {
		return JSONLines
	}
	return CLF
}

var errLine = errors.New("replay: unparseable line")

// parseCLF reads one line of the Common or Combined Log Format.
func parseCLF(line []byte, r *Record) error {
	s := string(bytes.TrimRight(line, "\r\n"))
	host, s, ok := strings.Cut(s, " ")
	if !ok || host == "" {
		return fmt.Errorf("%w: no host field", errLine)
	}
	_, s, ok = strings.Cut(s, " ") // ident
	if !ok {
		return fmt.Errorf("%w: no ident field", errLine)
	}
	user, s, ok := strings.Cut(s, " ")
	if !ok {
		return fmt.Errorf("%w: no authuser field", errLine)
	}
	if !strings.HasPrefix(s, "[") {
		return fmt.Errorf("%w: no [time] field", errLine)
	}
	ts, s, ok := strings.Cut(s[1:], "] ")
	if !ok {
		return fmt.Errorf("%w: unterminated [time] field", errLine)
	}
	t, err := time.Parse("02/Jan/2006:15:04:05 -0700", ts)
	if err != nil {
		return fmt.Errorf("%w: time %q", errLine, ts)
	}
	if err := checkTime(float64(t.UnixMicro()), ts); err != nil {
		return err
	}
	if !strings.HasPrefix(s, `"`) {
		return fmt.Errorf("%w: no \"request\" field", errLine)
	}
	req, s, ok := cutQuoted(s[1:])
	if !ok {
		return fmt.Errorf("%w: unterminated \"request\" field", errLine)
	}
	method, rest, ok := strings.Cut(req, " ")
	if !ok || method == "" {
		return fmt.Errorf("%w: request %q", errLine, req)
	}
	target, _, _ := strings.Cut(rest, " ")
	status, s, _ := strings.Cut(strings.TrimLeft(s, " "), " ")
	size, _, _ := strings.Cut(s, " ")
	r.Time, r.IP, r.Method, r.Target = t.UnixMicro(), host, method, target
	if user != "-" {
		r.User = user
	} else {
		r.User = ""
	}
	if r.Status, err = parseStatus(status); err != nil {
		return err
	}
	if r.Bytes, err = parseBytes(size); err != nil {
		return err
	}
	return nil
}

// cutQuoted returns the text of s up to its closing quote (a backslash
// escapes a quote, as Apache and nginx write them) and what follows it.
func cutQuoted(s string) (string, string, bool) {
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '\\':
			i++
		case '"':
			return s[:i], s[i+1:], true
		}
	}
	return "", "", false
}

func parseStatus(s string) (int, error) {
	n, err := strconv.Atoi(s)
	if err != nil || n < 100 || n > 999 {
		return 0, fmt.Errorf("%w: status %q", errLine, s)
	}
	return n, nil
}

func parseBytes(s string) (int64, error) {
	if s == "-" || s == "" {
		return 0, nil
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("%w: bytes %q", errLine, s)
	}
	return n, nil
}

// Fields maps the record's fields to the keys of JSON-lines logs
// (-fields time=ts,ip=remote_addr,...). Method and Path may be given
// separately, or Request may name a field holding a whole request line
// ("GET /x HTTP/1.1").
type Fields struct {
	Time, IP, User, Status, Bytes, Method, Path, Request string
}

// DefaultFields are the keys read when -fields does not name them.
var DefaultFields = Fields{Time: "time", IP: "ip", User: "user", Status: "status", Bytes: "bytes",
	Method: "method", Path: "path", Request: "request"}

// ParseFields reads a mapping such as
// "time=ts,ip=remote_addr,user=user,status=status,bytes=size"; names it
// does not mention keep their DefaultFields keys.
func ParseFields(s string) (Fields, error) {
	f := DefaultFields
	if strings.TrimSpace(s) == "" {
		return f, nil
	}
	for _, kv := range strings.Split(s, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(kv), "=")
		if !ok || v == "" {
			return f, fmt.Errorf("replay: -fields: %q is not name=key", kv)
		}
		dst, known := map[string]*string{"time": &f.Time, "ip": &f.IP, "user": &f.User, "status": &f.Status,
			"bytes": &f.Bytes, "method": &f.Method, "path": &f.Path, "request": &f.Request}[k]
		if !known {
			return f, fmt.Errorf("replay: -fields: unknown name %q (want time, ip, user, status, bytes, method, path or request)", k)
		}
		*dst = v
	}
	return f, nil
}

// parseJSON reads one JSON line with the mapping f.
func parseJSON(line []byte, f *Fields, r *Record) error {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(line, &m); err != nil {
		return fmt.Errorf("%w: %v", errLine, err)
	}
	str := func(k string) (string, bool) {
		v, ok := m[k]
		if !ok || string(v) == "null" {
			return "", false
		}
		var s string
		if json.Unmarshal(v, &s) == nil {
			return s, true
		}
		return string(v), true // a number
	}
	ts, ok := str(f.Time)
	if !ok {
		return fmt.Errorf("%w: no %q field", errLine, f.Time)
	}
	t, err := parseTime(ts)
	if err != nil {
		return err
	}
	ip, ok := str(f.IP)
	if !ok || ip == "" {
		return fmt.Errorf("%w: no %q field", errLine, f.IP)
	}
	user, _ := str(f.User)
	if user == "-" {
		user = ""
	}
	method, _ := str(f.Method)
	path, _ := str(f.Path)
	if req, ok := str(f.Request); ok && (method == "" || path == "") {
		m, rest, _ := strings.Cut(req, " ")
		p, _, _ := strings.Cut(rest, " ")
		method, path = m, p
	}
	if method == "" || path == "" {
		return fmt.Errorf("%w: no method and path (fields %q and %q, or %q)", errLine, f.Method, f.Path, f.Request)
	}
	st, ok := str(f.Status)
	if !ok {
		return fmt.Errorf("%w: no %q field", errLine, f.Status)
	}
	if r.Status, err = parseStatus(st); err != nil {
		return err
	}
	size, _ := str(f.Bytes)
	if r.Bytes, err = parseBytes(size); err != nil {
		return err
	}
	r.Time, r.IP, r.User, r.Method, r.Target = t, ip, user, method, path
	return nil
}

// parseTime reads RFC 3339 or Unix seconds or milliseconds (told apart by
// size: below 10^11 is seconds, which is the year 5138) into microseconds.
func parseTime(s string) (int64, error) {
	if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
		return t.UnixMicro(), checkTime(float64(t.UnixMicro()), s)
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil || f <= 0 {
		return 0, fmt.Errorf("%w: time %q is neither RFC 3339 nor Unix seconds or milliseconds", errLine, s)
	}
	if f < 1e11 {
		f *= 1e6
	} else {
		f *= 1e3
	}
	// Checked as a float: a number beyond int64's range must not wrap
	// into the range.
	if err := checkTime(f, s); err != nil {
		return 0, err
	}
	return int64(f), nil
}

// The times a line may have, in µs since 1970: from 1970-01-01 (2000-01-01
// through the engine's script, see source.from) to 2250-01-01 UTC excluded,
// the engine's own upper bound (engine.WithClock refuses times outside
// 2000..2250), so that a line of another era (a year 9999, a clock before
// 1970) is a bad line, not a span of centuries between the first line and
// the last. TestTimeRange replays both ends through the engine.
const (
	minTime       = 0                     // 1970-01-01
	minScriptTime = 946_684_800_000_000   // 2000-01-01
	maxTime       = 8_835_955_200_000_000 // 2250-01-01
)

// checkTime fails when t, in µs, is outside minTime..maxTime; s is the
// time as written, for the error.
func checkTime(t float64, s string) error {
	if t < minTime || t >= maxTime {
		return fmt.Errorf("%w: time %q outside the years 1970 to 2249, which the replay decides in", errLine, s)
	}
	return nil
}

// errEarly is the error of a line the engine's script cannot decide.
var errEarly = fmt.Errorf("%w: time before 2000, which the engine's script does not decide (the in-process decider takes times from 1970)", errLine)
