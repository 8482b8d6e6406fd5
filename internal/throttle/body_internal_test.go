package throttle

import (
	"bytes"
	"math/rand/v2"
	"testing"
)

// TestBodyTailMemory: the kept tail grows with what is written, never
// beyond bodyTail, and holds the last bodyTail bytes in order.
func TestBodyTailMemory(t *testing.T) {
	small := tail{max: bodyTail}
	small.write(make([]byte, 200))
	if c := cap(small.buf); c > 512 {
		t.Errorf("200 bytes kept in a buffer of %d", c)
	}
	if got := small.bytes(); len(got) != 200 {
		t.Errorf("kept %d bytes of 200", len(got))
	}

	var all []byte
	big := tail{max: bodyTail}
	for len(all) < 3*bodyTail+5 {
		p := make([]byte, 1+rand.IntN(70000))
		for i := range p {
			p[i] = byte(rand.IntN(256))
		}
		all = append(all, p...)
		big.write(p)
		if c := cap(big.buf); c > bodyTail {
			t.Fatalf("after %d bytes the tail's buffer holds %d, above %d", len(all), c, bodyTail)
		}
		if want := min(len(all), bodyTail); len(big.buf) != want {
			t.Fatalf("after %d bytes the tail keeps %d, want %d", len(all), len(big.buf), want)
		}
	}
	if got := big.bytes(); !bytes.Equal(got, all[len(all)-bodyTail:]) {
		t.Error("the tail is not the last bodyTail bytes in order")
	}

	one := tail{max: bodyTail}
	one.write(all[:bodyTail/2])
	one.write(all) // one write above bodyTail
	if got := one.bytes(); !bytes.Equal(got, all[len(all)-bodyTail:]) || cap(got) != bodyTail {
		t.Errorf("after one long write the tail keeps %d bytes (cap %d), not the last bodyTail", len(got), cap(got))
	}
}

// FuzzBodyTail: a small tail, written in pieces of any sizes, keeps the
// last max bytes in order.
func FuzzBodyTail(f *testing.F) {
	f.Add([]byte("data: {\"usage\":{\"total_tokens\":42}}\n\ndata: [DONE]\n\n"), uint8(16), []byte{3, 0, 7, 40, 1})
	f.Add([]byte("x"), uint8(1), []byte{})
	f.Fuzz(func(t *testing.T, data []byte, max uint8, cuts []byte) {
		tl := tail{max: 1 + int(max)}
		rest := data
		for _, c := range cuts {
			k := min(int(c), len(rest))
			tl.write(rest[:k])
			rest = rest[k:]
			if cap(tl.buf) > tl.max {
				t.Fatalf("a tail of %d holds a buffer of %d", tl.max, cap(tl.buf))
			}
		}
		tl.write(rest)
		want := data[len(data)-min(len(data), tl.max):]
		if got := tl.bytes(); !bytes.Equal(got, want) {
			t.Fatalf("kept %q, want %q", got, want)
		}
	})
}
