package tally

import (
	"context"
	"crypto/rand"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/slidelimit/slidelimit/engine"
	"github.com/slidelimit/slidelimit/internal/keyparts"
	"github.com/slidelimit/slidelimit/internal/redistest"
	"github.com/slidelimit/slidelimit/rules"
)

// heldBytes sums the lengths of the strings v holds: in its fields,
// elements, map keys and values, and what its pointers point to. It
// measures what a structure retains of its subjects, whatever its fields.
func heldBytes(v reflect.Value) int {
	switch v.Kind() {
	case reflect.String:
		return v.Len()
	case reflect.Struct:
		n := 0
		for i := range v.NumField() {
			n += heldBytes(v.Field(i))
		}
		return n
	case reflect.Slice, reflect.Array:
		if v.Kind() == reflect.Array && v.Type().Elem().Kind() != reflect.String && v.Type().Elem().Kind() != reflect.Struct {
			return 0
		}
		n := 0
		for i := range v.Len() {
			n += heldBytes(v.Index(i))
		}
		return n
	case reflect.Map:
		n := 0
		for it := v.MapRange(); it.Next(); {
			n += heldBytes(it.Key()) + heldBytes(it.Value())
		}
		return n
	case reflect.Pointer:
		if v.IsNil() || v.Type().Elem().Kind() != reflect.Struct {
			return 0
		}
		return heldBytes(v.Elem())
	}
	return 0
}

// tallyBytes is what the tallies retain of strings: the entries pending
// in the shards, the hot subject and the ones it replaced, and the names
// remembered for TopDenied. Not safe while denials are noted.
func tallyBytes(t *Tallies) int {
	n := 0
	for i := range t.shards {
		n += heldBytes(reflect.ValueOf(t.shards[i].keys))
	}
	if h := t.hot.Load(); h != nil {
		n += heldBytes(reflect.ValueOf(h.key))
	}
	for _, h := range t.retired {
		n += heldBytes(reflect.ValueOf(h.key))
	}
	return n + heldBytes(reflect.ValueOf(t.names))
}

// largeSubject returns a subject of size bytes that starts with prefix.
func largeSubject(prefix string, size int) string {
	return prefix + strings.Repeat("abcdefghijklmnopqrstuvwxyz", size/26+1)[:size-len(prefix)]
}

// storedHashLen is the length of a stored hash: "#" and the base64url of
// a SHA-256.
const storedHashLen = 1 + 43

// TestTallyLargeSubjectsBounded denies 100 distinct subjects of 256 KiB,
// each twice, through Allow on a real Redis: what the tallies retain of
// them, pending and after the write, stays bounded by the entries (never
// their size), and TopDenied shows each by its first bytes (Truncated)
// with the stored hash that peeks at it and resets it.
func TestTallyLargeSubjectsBounded(t *testing.T) {
	t.Parallel()
	_, c := redistest.StartClient(t)
	e := newEngine(t, c, engine.WithKeyPrefix(redistest.Prefix(t)))
	tl := withTallies(t, e, 0)
	ctx := context.Background()
	const subjects, size, preview = 100, 256 << 10, 48
	// The bound: per entry (a subject denied twice may have one in each
	// of two shards, and one among the names), a stored hash, a preview,
	// the scope and the header's name; whatever the subjects' size.
	const bound = subjects * 3 * (storedHashLen + preview + 32)
	req := func(s string) engine.Request {
		r := engine.One("GET /x", rules.Header, s, win(1, time.Hour))
		r.Checks[0].Name = "X-Api-Key"
		r.Checks[0].Block = time.Hour
		return r
	}
	for i := range subjects {
		s := largeSubject("header:key-"+strconv.Itoa(i)+"-", size)
		for j := range 3 {
			d, err := e.Allow(ctx, req(s))
			if err != nil || d.Allowed != (j == 0) {
				t.Fatalf("subject %d request %d: allowed %v, %v", i, j, d.Allowed, err)
			}
		}
	}
	if n := tallyBytes(tl); n > bound {
		t.Errorf("pending: the tallies retain %d bytes of strings for %d subjects of %d bytes, more than %d", n, subjects, size, bound)
	}
	keys, counts := tl.take(nil, nil)
	tl.flush(keys, counts)
	n := tallyBytes(tl)
	if n > bound {
		t.Errorf("written: the tallies retain %d bytes of strings for %d subjects of %d bytes, more than %d", n, subjects, size, bound)
	}
	t.Logf("%d subjects of %d KiB denied twice: the tallies retain %d bytes", subjects, size>>10, n)
	if f := tl.Stats().Failed; f != 0 {
		t.Fatalf("%d denials failed to be written", f)
	}
	top, err := tl.TopDenied(ctx, time.Minute, 0)
	if err != nil || len(top) != subjects {
		t.Fatalf("top: %d entries, %v; want %d", len(top), err, subjects)
	}
	d := top[0]
	if d.Denied != 2 || !d.Truncated || d.Hashed || len(d.Subject) != preview || !strings.HasPrefix(d.Subject, "header:key-") ||
		!keyparts.IsStoredHash(d.Hash) || d.Rule != "header(X-Api-Key)" {
		t.Fatalf("top entry: %+v", d)
	}
	// The hash is the key's: it finds the subject's windows and block.
	i, _ := strconv.Atoi(strings.Split(strings.TrimPrefix(d.Subject, "header:key-"), "-")[0])
	raw := largeSubject("header:key-"+strconv.Itoa(i)+"-", size)
	if want := storedHash(raw); d.Hash != want {
		t.Fatalf("hash %s, want %s", d.Hash, want)
	}
	peek := req(d.Hash)
	peek.Checks[0].Hashed = true
	p, err := e.Peek(ctx, peek)
	if err != nil || !p.Blocked || p.Windows[0].Used != 1 {
		t.Fatalf("peek by hash: %+v, %v; want blocked, 1 used", p, err)
	}
	if err := e.Reset(ctx, "GET /x", peek.Checks[0].Rule, d.Hash, true); err != nil {
		t.Fatal(err)
	}
	if a, err := e.Allow(ctx, req(raw)); err != nil || !a.Allowed {
		t.Fatalf("after ResetHashed: %+v, %v; want admitted", a, err)
	}
}

// TestTallyLargeFlood notes 300 denied subjects of 2 MiB in one period,
// as the engine's hook gives them (by their stored hash and first 48
// bytes), and an abuser denied 304 times among them: the write sends
// what was hashed at denial time, within the engine's default deadline
// (100 ms), so none of it fails and the abuser's count on the top list
// is exact. (When the write hashed the subjects under its deadline, 600
// MiB of them, which takes 240 ms at 2.5 GB/s, every write failed and
// the abuser was missing; the tallies now have no way to hash.)
func TestTallyLargeFlood(t *testing.T) {
	t.Parallel()
	_, c := redistest.StartClient(t)
	st := storeOf(newEngine(t, c, engine.WithKeyPrefix(redistest.Prefix(t)), engine.WithTimeout(100*time.Millisecond)))
	st.Timeout = 100 * time.Millisecond // the engine's default
	tl := New(st)
	ctx := context.Background()
	const flood, size, abuse = 300, 2 << 20, 304
	// Distinct subjects without 600 MiB of allocations: views of one
	// random buffer at different offsets.
	buf := make([]byte, size+flood)
	rand.Read(buf)
	big := string(buf)
	abuser := engine.Denial{Scope: "GET /files", Kind: rules.Header, Subject: "header:abuser"}
	abused := 0
	for i := range flood {
		s := big[i : i+size]
		tl.Note(engine.Denial{Scope: "GET /files", Kind: rules.Header, Subject: storedHash(s), Shown: s[:48], Hashed: true, Cut: true})
		if i%10 == 0 {
			tl.Note(abuser)
			abused++
		}
	}
	for ; abused < abuse; abused++ {
		tl.Note(abuser)
	}
	keys, counts := tl.take(nil, nil)
	tl.flush(keys, counts)
	if s := tl.Stats(); s.Failed != 0 || s.Overflow != 0 {
		t.Fatalf("tally stats %+v, want nothing failed or dropped", s)
	}
	top, err := tl.TopDenied(ctx, time.Minute, 3)
	if err != nil || len(top) == 0 {
		t.Fatalf("top: %+v, %v", top, err)
	}
	if top[0].Subject != "header:abuser" || top[0].Denied != abuse {
		t.Fatalf("top: %s %d; want header:abuser %d", top[0].Subject, top[0].Denied, abuse)
	}
	if top[1].Denied != 1 || !top[1].Truncated || !keyparts.IsStoredHash(top[1].Hash) {
		t.Fatalf("second: %+v; want a flood subject denied once, truncated, with its hash", top[1])
	}
}
