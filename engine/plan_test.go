package engine

import (
	"strings"
	"testing"

	"github.com/slidelimit/slidelimit/engine/internal/plan"
	"github.com/slidelimit/slidelimit/rules"
)

func TestSlot(t *testing.T) {
	t.Parallel()
	if got := crc16("123456789"); got != 0x31C3 {
		t.Errorf("crc16(123456789) = %#x, want 0x31c3", got)
	}
	for key, want := range map[string]uint16{
		"foo":                    12182,
		"bar":                    5061,
		"{user1000}.following":   slot("user1000"),
		"foo{}{bar}":             slot("foo{}{bar}"), // empty tag: whole key
		"foo{{bar}}zap":          slot("{bar"),
		"foo{bar}{zap}":          slot("bar"),
		"slidelimit:{s|user|42}": slot("s|user|42"),
	} {
		if got := slot(key); got != want {
			t.Errorf("slot(%q) = %d, want %d", key, got, want)
		}
	}
}

func TestKeys(t *testing.T) {
	t.Parallel()
	k := newKeyer(&config{prefix: "p:"})
	key := func(scope string, kind rules.Kind, name, subject string) string {
		return string(k.AppendKey(nil, scope, kind, name, "", subject))
	}
	if got, want := key("GET /files/{id}", rules.Header, "X-Api-Key", "a b|c"), "p:{GET%20/files/%7Bid%7D|header:X-Api-Key|a%20b%7Cc}"; got != want {
		t.Errorf("key = %q, want %q", got, want)
	}
	if got, want := key("s", rules.User, "", "42"), "p:{s|user|42}"; got != want {
		t.Errorf("key = %q, want %q", got, want)
	}

	// Triples that a naive join would confuse.
	long := strings.Repeat("x", plan.MaxRawSubject+1)
	triples := [][4]string{
		{"a|b", "user", "", "c"}, {"a", "user", "", "b|c"}, {"a", "user|b", "", "c"},
		{"a", "header", "b:c", "d"}, {"a", "header:b", "c", "d"}, {"a", "header", "b", "c:d"},
		{"a", "ip", "", ""}, {"a", "ip", "", "%"}, {"a", "ip", "", "%25"}, {"a", "ip", "", "{}"},
		{"a", "ip", "", "}"}, {"a", "ip", "", "#x"}, {"a", "ip", "", long}, {"a", "ip", "", long + "y"},
		{"", "", "", ""}, {"a", "ip", "x", ""}, {"a", "ip", "", "x"},
	}
	// The hashed form of a long subject must not equal any raw subject.
	hashed := key("a", rules.IP, "", long)
	raw := hashed[strings.LastIndexByte(hashed, '|')+1 : len(hashed)-1]
	triples = append(triples, [4]string{"a", "ip", "", raw})
	seen := map[string][4]string{}
	for _, tr := range triples {
		kk := key(tr[0], rules.Kind(tr[1]), tr[2], tr[3])
		if prev, ok := seen[kk]; ok {
			t.Errorf("%q and %q share key %q", prev, tr, kk)
		}
		seen[kk] = tr
		// The hash tag is exactly the encoded triple: no client byte can
		// end it early or open another.
		if i, j := strings.IndexByte(kk, '{'), strings.IndexByte(kk, '}'); i != 2 || j != len(kk)-1 {
			t.Errorf("key %q: braces at %d, %d", kk, i, j)
		}
	}
	if len(hashed) > 100 || !strings.Contains(hashed, "|#") {
		t.Errorf("long subject not hashed: %q", hashed)
	}

	// WithHashedSubjects: every subject hashed, keyed by the secret.
	k1 := newKeyer(&config{prefix: "p:", hashAll: true, secret: []byte("s1")})
	k2 := newKeyer(&config{prefix: "p:", hashAll: true, secret: []byte("s2")})
	h1 := string(k1.AppendKey(nil, "s", rules.IP, "", "", "10.0.0.1"))
	h2 := string(k2.AppendKey(nil, "s", rules.IP, "", "", "10.0.0.1"))
	if strings.Contains(h1, "10.0.0.1") || !strings.Contains(h1, "|#") || h1 == h2 {
		t.Errorf("hashed keys %q %q", h1, h2)
	}
	if again := string(k1.AppendKey(nil, "s", rules.IP, "", "", "10.0.0.1")); again != h1 {
		t.Errorf("hash not stable: %q %q", h1, again)
	}
}

func FuzzKeys(f *testing.F) {
	f.Add("s", "user", "", "42", "s", "user", "", "4|2")
	f.Fuzz(func(t *testing.T, s1, k1, n1, sub1, s2, k2, n2, sub2 string) {
		k := newKeyer(&config{prefix: "p:"})
		a := string(k.AppendKey(nil, s1, rules.Kind(k1), n1, "", sub1))
		b := string(k.AppendKey(nil, s2, rules.Kind(k2), n2, "", sub2))
		same := s1 == s2 && k1 == k2 && n1 == n2 && sub1 == sub2
		if (a == b) != same {
			t.Fatalf("keys %q %q for %q and %q", a, b, []string{s1, k1, n1, sub1}, []string{s2, k2, n2, sub2})
		}
		if slot(a) != crc16(a[3:len(a)-1])&16383 {
			t.Fatalf("hash tag of %q is not the encoded triple", a)
		}
	})
}

// FuzzWeightedKeys checks that keys with a cost segment (weighted keys)
// never meet each other or a count key of other fields.
func FuzzWeightedKeys(f *testing.F) {
	f.Add("s", "user", "", "42", "bytes", "s", "user", "", "42|bytes", "")
	f.Fuzz(func(t *testing.T, s1, k1, n1, sub1, c1, s2, k2, n2, sub2, c2 string) {
		k := newKeyer(&config{prefix: "p:"})
		a := string(k.AppendKey(nil, s1, rules.Kind(k1), n1, c1, sub1))
		b := string(k.AppendKey(nil, s2, rules.Kind(k2), n2, c2, sub2))
		same := s1 == s2 && k1 == k2 && n1 == n2 && sub1 == sub2 && c1 == c2
		if (a == b) != same {
			t.Fatalf("keys %q %q for %q and %q", a, b, []string{s1, k1, n1, sub1, c1}, []string{s2, k2, n2, sub2, c2})
		}
		// The cost segment follows the hash tag: a subject's keys share
		// its count key's slot.
		count := string(k.AppendKey(nil, s1, rules.Kind(k1), n1, "", sub1))
		if slot(a) != crc16(count[3:len(count)-1])&16383 || !strings.HasPrefix(a, count) {
			t.Fatalf("hash tag of %q is not the encoded fields of %q", a, count)
		}
	})
}
