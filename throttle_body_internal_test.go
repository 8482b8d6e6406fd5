package slidelimit

import (
	"bytes"
	"math/rand/v2"
	"testing"
)

// TestBodyTailMemory: the kept tail grows with what is written, never
// beyond bodyTail, and holds the last bodyTail bytes in order.
func TestBodyTailMemory(t *testing.T) {
	var small tail
	small.write(make([]byte, 200))
	if c := cap(small.buf); c > 512 {
		t.Errorf("200 bytes kept in a buffer of %d", c)
	}
	if got := small.bytes(); len(got) != 200 {
		t.Errorf("kept %d bytes of 200", len(got))
	}

	var all []byte
	var big tail
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

	var one tail
	one.write(all[:bodyTail/2])
	one.write(all) // one write above bodyTail
	if got := one.bytes(); !bytes.Equal(got, all[len(all)-bodyTail:]) || cap(got) != bodyTail {
		t.Errorf("after one long write the tail keeps %d bytes (cap %d), not the last bodyTail", len(got), cap(got))
	}
}
