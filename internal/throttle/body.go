package throttle

import (
	"io"
	"net/http"
	"runtime"
	"slices"
	"sync"
)

// bodyTail is the most of a response body WithActualBody passes: its last
// bytes.
const bodyTail = 1 << 20

// finishBody finishes the Permit of a response when its body is first
// closed, settled to what the options read from the response and from the
// bytes the caller read.
type finishBody struct {
	io.ReadCloser
	cfg  *TransportConfig
	resp *http.Response
	p    *Permit
	tap  bool // count the bytes read (WithActualBody, WithActualBytes)
	once sync.Once

	cleanup runtime.Cleanup // finishes p once the body is unreachable unclosed

	mu     sync.Mutex // Close may run concurrently with Read
	n      int64      // bytes read
	tail   tail       // with WithActualBody, the last bodyTail bytes read
	closed bool
}

// newFinishBody wraps resp.Body to finish p when it is closed.
func newFinishBody(cfg *TransportConfig, resp *http.Response, p *Permit) *finishBody {
	b := &finishBody{ReadCloser: resp.Body, cfg: cfg, resp: resp, p: p, tap: cfg.Body != nil || len(cfg.Bytes) > 0}
	b.tail.max = bodyTail
	if b.ReadCloser == nil {
		b.ReadCloser = http.NoBody
	}
	b.cleanup = runtime.AddCleanup(b, (*Permit).Dropped, p)
	return b
}

// Read reads the body, counting and keeping what the options need.
func (b *finishBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if b.tap && n > 0 {
		read := p[:min(n, len(p))]
		b.mu.Lock()
		if !b.closed {
			b.n += int64(len(read))
			if b.cfg.Body != nil {
				b.tail.write(read)
			}
		}
		b.mu.Unlock()
	}
	return n, err
}

// Close closes the body and, the first time, finishes the Permit.
func (b *finishBody) Close() error {
	err := b.ReadCloser.Close()
	b.once.Do(b.finish)
	return err
}

// finish settles the call to what the options read and finishes its
// Permit. A function's panic goes on to the caller of Close, the Permit
// finished with its estimates (Finish does nothing the second time).
func (b *finishBody) finish() {
	b.cleanup.Stop()
	defer b.p.Finish(nil)
	b.mu.Lock()
	b.closed = true
	n, body := b.n, b.tail.bytes()
	b.tail = tail{} // fn may keep body
	b.mu.Unlock()
	var actual map[string]int64
	if b.cfg.Actual != nil {
		actual = b.cfg.Actual(b.resp)
	}
	if b.cfg.Body != nil {
		actual = merge(actual, b.cfg.Body(b.resp, body))
	}
	for _, name := range b.cfg.Bytes {
		actual = merge(actual, map[string]int64{name: n})
	}
	b.p.Finish(actual)
}

// merge returns a with b's values set, in a new map when both have some:
// the functions' maps are theirs.
func merge(a, b map[string]int64) map[string]int64 {
	if len(a) == 0 {
		return b
	}
	if len(b) == 0 {
		return a
	}
	m := make(map[string]int64, len(a)+len(b))
	for k, v := range a {
		m[k] = v
	}
	for k, v := range b {
		m[k] = v
	}
	return m
}

// tail keeps the last max bytes written to it (bodyTail, or less in
// tests), in memory that grows as they come: a ring once full.
type tail struct {
	max   int
	buf   []byte
	start int // once full, the index of the oldest byte
}

// write keeps p's bytes, dropping the oldest beyond t.max.
func (t *tail) write(p []byte) {
	if t.max <= 0 {
		return
	}
	if len(p) >= t.max {
		if cap(t.buf) < t.max {
			t.buf = make([]byte, t.max)
		}
		t.buf = t.buf[:t.max]
		copy(t.buf, p[len(p)-t.max:])
		t.start = 0
		return
	}
	if room := t.max - len(t.buf); room > 0 {
		k := min(room, len(p))
		if len(t.buf)+k > cap(t.buf) {
			nb := make([]byte, len(t.buf), min(t.max, max(2*cap(t.buf), len(t.buf)+k, 512)))
			copy(nb, t.buf)
			t.buf = nb
		}
		t.buf = append(t.buf, p[:k]...)
		p = p[k:]
	}
	for len(p) > 0 {
		c := copy(t.buf[t.start:], p)
		p = p[c:]
		t.start = (t.start + c) % t.max
	}
}

// bytes returns the bytes kept, oldest first, turning the ring in place.
func (t *tail) bytes() []byte {
	if t.start != 0 {
		slices.Reverse(t.buf[:t.start])
		slices.Reverse(t.buf[t.start:])
		slices.Reverse(t.buf)
		t.start = 0
	}
	return t.buf
}
