package replay

import "testing"

// TestPrintable: controls, DEL, C1, format runes and bytes that are not
// UTF-8 are escaped; printable UTF-8 (backslash included) is kept; and
// escaping twice changes nothing more.
func TestPrintable(t *testing.T) {
	for in, want := range map[string]string{
		"peer:\x1b[2J\x1b]0;PWN\a": `peer:\x1b[2J\x1b]0;PWN\a`,
		"a\tb\r\n":                 `a\tb\r\n`,
		"del\x7f":                  `del\x7f`,
		"c1\u009b31m":              `c1\u009b31m`,
		"rtl\u202eoverride":        `rtl\u202eoverride`,
		"bad\xff\xfe":              `bad\xff\xfe`,
		"user:jörg 日本 CORP\\bob":   "user:jörg 日本 CORP\\bob",
		"":                         "",
	} {
		got := Printable(in)
		if got != want {
			t.Errorf("Printable(%q) = %q, want %q", in, got, want)
		}
		if again := Printable(got); again != got {
			t.Errorf("Printable(%q) = %q: not stable", got, again)
		}
	}
}
