package redistest

import (
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Proxy is a TCP proxy on a free loopback port in front of an address,
// standing for the network between two regions. Each direction of every
// connection delays what it carries by a delay drawn per chunk between
// the proxy's minimum and maximum (jitter), and never reorders it: a chunk
// leaves no earlier than the one read before it, so every delay stays
// within the bounds.
//
// Cut partitions the link: open connections are dropped at once (both
// ends closed, so a call in flight fails at once, as after a reset), and
// connections made while cut are accepted but stalled: nothing is read
// from them or forwarded, so calls on them wait for their own timeouts,
// as behind a real partition. Heal closes the stalled connections without
// forwarding a byte of them (nothing written during a partition reaches
// the server late) and forwards new connections again. Close stops the
// proxy and waits for all its goroutines.
type Proxy struct {
	// Addr is where clients connect, host:port on 127.0.0.1.
	Addr string

	target   string
	ln       net.Listener
	min, max atomic.Int64 // the delay's bounds, in nanoseconds

	mu     sync.Mutex
	cut    bool
	closed bool
	healed chan struct{}         // closed by Heal; replaced by Cut
	links  map[*link]struct{}    // forwarding connections
	stall  map[net.Conn]struct{} // connections accepted while cut

	wg sync.WaitGroup
}

// link is one proxied connection: the client's end and the server's.
type link struct {
	client, server net.Conn
	once           sync.Once
	dead           chan struct{} // closed by abort
}

// abort closes both ends; it is safe to call more than once.
func (l *link) abort() {
	l.once.Do(func() {
		close(l.dead)
		l.client.Close()
		l.server.Close()
	})
}

// StartProxy starts a proxy in front of target that delays each direction
// by min to max, and closes it when the test ends.
func StartProxy(tb testing.TB, target string, min, max time.Duration) *Proxy {
	tb.Helper()
	p, err := NewProxy(target, min, max)
	if err != nil {
		tb.Fatalf("%v", err)
	}
	tb.Cleanup(p.Close)
	return p
}

// NewProxy starts a proxy in front of target that delays each direction
// by min to max. The caller must Close it.
func NewProxy(target string, min, max time.Duration) (*Proxy, error) {
	if min < 0 || max < min {
		return nil, fmt.Errorf("redistest: proxy delay %v to %v: want 0 <= min <= max", min, max)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("redistest: proxy: listen: %v", err)
	}
	healed := make(chan struct{})
	close(healed)
	p := &Proxy{
		Addr:   ln.Addr().String(),
		target: target,
		ln:     ln,
		healed: healed,
		links:  map[*link]struct{}{},
		stall:  map[net.Conn]struct{}{},
	}
	p.SetDelay(min, max)
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// SetDelay changes the delay's bounds for chunks read from now on, as for
// a lag spike. A negative min counts as 0, and a max below min as min.
func (p *Proxy) SetDelay(min, max time.Duration) {
	min = maxDur(min, 0)
	max = maxDur(max, min)
	p.min.Store(int64(min))
	p.max.Store(int64(max))
}

// delay draws the delay of one chunk.
func (p *Proxy) delay() time.Duration {
	lo, hi := p.min.Load(), p.max.Load()
	if hi <= lo {
		return time.Duration(lo)
	}
	return time.Duration(lo + rand.Int64N(hi-lo+1))
}

// Cut partitions the link: it drops every open connection and stalls new
// ones until Heal. Cutting a cut proxy does nothing.
func (p *Proxy) Cut() {
	p.mu.Lock()
	if p.cut || p.closed {
		p.mu.Unlock()
		return
	}
	p.cut = true
	p.healed = make(chan struct{})
	links := p.links
	p.links = map[*link]struct{}{}
	p.mu.Unlock()
	for l := range links {
		l.abort()
	}
}

// Heal ends a partition: it closes the connections stalled since Cut and
// forwards new ones again. Healing a proxy that is not cut does nothing.
func (p *Proxy) Heal() {
	p.mu.Lock()
	if !p.cut {
		p.mu.Unlock()
		return
	}
	p.cut = false
	close(p.healed)
	stalled := p.stall
	p.stall = map[net.Conn]struct{}{}
	p.mu.Unlock()
	for c := range stalled {
		c.Close()
	}
}

// IsCut reports whether the link is partitioned.
func (p *Proxy) IsCut() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.cut
}

// Close stops accepting, closes every connection and waits until every
// goroutine of the proxy has returned. It is safe to call more than once.
func (p *Proxy) Close() {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		p.wg.Wait()
		return
	}
	p.closed = true
	links, stalled := p.links, p.stall
	p.links, p.stall = map[*link]struct{}{}, map[net.Conn]struct{}{}
	p.mu.Unlock()
	p.ln.Close()
	for l := range links {
		l.abort()
	}
	for c := range stalled {
		c.Close()
	}
	p.wg.Wait()
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			return // closed
		}
		p.mu.Lock()
		switch {
		case p.closed:
			p.mu.Unlock()
			c.Close()
			return
		case p.cut:
			p.stall[c] = struct{}{}
			p.mu.Unlock()
			continue
		}
		p.wg.Add(1)
		p.mu.Unlock()
		go p.serve(c)
	}
}

// serve connects c to the target and forwards both directions until both
// end, or either fails, or the proxy is cut or closed.
func (p *Proxy) serve(c net.Conn) {
	defer p.wg.Done()
	d := net.Dialer{Timeout: 5 * time.Second}
	s, err := d.Dial("tcp", p.target)
	if err != nil {
		c.Close()
		return
	}
	l := &link{client: c, server: s, dead: make(chan struct{})}
	p.mu.Lock()
	if p.cut || p.closed {
		p.mu.Unlock()
		l.abort()
		return
	}
	p.links[l] = struct{}{}
	p.mu.Unlock()

	var dirs sync.WaitGroup
	dirs.Add(2)
	go func() { defer dirs.Done(); p.pipe(l, c, s) }()
	go func() { defer dirs.Done(); p.pipe(l, s, c) }()
	dirs.Wait()
	l.abort()
	p.mu.Lock()
	delete(p.links, l)
	p.mu.Unlock()
}

// chunk is what one read returned, and when it may be written.
type chunk struct {
	b  []byte
	at time.Time
}

// pipe forwards src to dst with the proxy's delay: a reader stamps each
// chunk with its due time, never earlier than the previous chunk's, and a
// writer writes it then. At src's end it half-closes dst once every chunk
// is written; on any error it aborts the link.
func (p *Proxy) pipe(l *link, src, dst net.Conn) {
	queue := make(chan chunk, 256)
	var wrote sync.WaitGroup
	wrote.Add(1)
	go func() {
		defer wrote.Done()
		timer := time.NewTimer(time.Hour)
		defer timer.Stop()
		for ch := range queue {
			if wait := time.Until(ch.at); wait > 0 {
				timer.Reset(wait)
				select {
				case <-timer.C:
				case <-l.dead:
					for range queue { // let the reader finish
					}
					return
				}
			}
			if _, err := dst.Write(ch.b); err != nil {
				l.abort()
				for range queue {
				}
				return
			}
		}
		if tc, ok := dst.(*net.TCPConn); ok {
			tc.CloseWrite()
		}
	}()
	var last time.Time
	for {
		buf := make([]byte, 32<<10)
		n, err := src.Read(buf)
		if n > 0 {
			at := time.Now().Add(p.delay())
			if at.Before(last) {
				at = last
			}
			last = at
			queue <- chunk{b: buf[:n], at: at}
		}
		if err != nil {
			if !errors.Is(err, io.EOF) {
				l.abort() // a reset, or the link was cut or closed
			}
			close(queue)
			break
		}
	}
	wrote.Wait()
}

func maxDur(a, b time.Duration) time.Duration {
	if a > b {
		return a
	}
	return b
}
