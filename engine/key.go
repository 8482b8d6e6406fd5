package engine

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"hash"
	"sync"

	"github.com/slidelimit/slidelimit/rules"
)

// maxRawSubject is the longest subject stored as is; longer ones are
// hashed so that keys stay short.
const maxRawSubject = 128

// escaped marks the bytes percent-encoded in keys (see the package
// documentation for the key format): the separators, the braces, the escape
// and hash markers, and space and control bytes, which keep keys readable
// in redis-cli.
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

func appendEscaped(b []byte, s string) []byte {
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

// keyer builds Redis keys. It is safe for concurrent use.
type keyer struct {
	prefix  string
	hashAll bool
	macs    *sync.Pool // of hash.Hash (HMAC-SHA-256); nil without a secret
}

func newKeyer(c *config) *keyer {
	k := &keyer{prefix: c.prefix, hashAll: c.hashAll}
	if c.hashAll && len(c.secret) > 0 {
		secret := c.secret
		k.macs = &sync.Pool{New: func() any { return hmac.New(sha256.New, secret) }}
	}
	return k
}

// appendKey appends the key of (scope, limiter, subject) to b. cost is the
// limiter's key cost (see keyCost): "" for a count key, whose name has three
// segments; a weighted key has a fourth, the cost.
func (k *keyer) appendKey(b []byte, scope string, kind rules.Kind, name, cost, subject string) []byte {
	b = append(b, k.prefix...)
	b = append(b, '{')
	b = appendEscaped(b, scope)
	b = append(b, '|')
	b = appendEscaped(b, string(kind))
	if name != "" {
		b = append(b, ':')
		b = appendEscaped(b, name)
	}
	b = append(b, '|')
	if k.hashAll || len(subject) > maxRawSubject {
		b = k.appendHashed(b, subject)
	} else {
		b = appendEscaped(b, subject)
	}
	if cost != "" {
		b = append(b, '|')
		b = appendEscaped(b, cost)
	}
	return append(b, '}')
}

func (k *keyer) appendHashed(b []byte, subject string) []byte {
	var sum [sha256.Size]byte
	if k.macs != nil {
		h := k.macs.Get().(hash.Hash)
		h.Reset()
		h.Write([]byte(subject))
		h.Sum(sum[:0])
		k.macs.Put(h)
	} else {
		sum = sha256.Sum256([]byte(subject))
	}
	b = append(b, '#')
	return base64.RawURLEncoding.AppendEncode(b, sum[:])
}
