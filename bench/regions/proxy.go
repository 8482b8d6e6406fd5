package main

import (
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// proxy stands for the network between two regions: it delays each
// direction of every connection by a fixed delay, never reordering, counts
// the bytes it carries, and can be cut (open connections dropped, new ones
// refused until healed). A minimal copy of the main module's
// internal/redistest.Proxy, which bench cannot import.
type proxy struct {
	addr   string
	target string
	delay  time.Duration
	ln     net.Listener
	bytes  atomic.Int64

	mu    sync.Mutex
	cut   bool
	conns map[net.Conn]struct{}
	wg    sync.WaitGroup
}

func startProxy(target string, delay time.Duration) (*proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &proxy{addr: ln.Addr().String(), target: target, delay: delay, ln: ln, conns: map[net.Conn]struct{}{}}
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

func (p *proxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		if p.cut {
			p.mu.Unlock()
			c.Close()
			continue
		}
		p.wg.Add(1)
		p.mu.Unlock()
		go p.serve(c)
	}
}

func (p *proxy) serve(c net.Conn) {
	defer p.wg.Done()
	s, err := net.DialTimeout("tcp", p.target, 5*time.Second)
	if err != nil {
		c.Close()
		return
	}
	p.mu.Lock()
	p.conns[c], p.conns[s] = struct{}{}, struct{}{}
	p.mu.Unlock()
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); p.pipe(c, s) }()
	go func() { defer wg.Done(); p.pipe(s, c) }()
	wg.Wait()
	p.mu.Lock()
	delete(p.conns, c)
	delete(p.conns, s)
	p.mu.Unlock()
}

// pipe forwards src to dst, each chunk p.delay after it was read.
func (p *proxy) pipe(src, dst net.Conn) {
	type chunk struct {
		b  []byte
		at time.Time
	}
	q := make(chan chunk, 1024)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ch := range q {
			time.Sleep(time.Until(ch.at))
			if _, err := dst.Write(ch.b); err != nil {
				break
			}
			p.bytes.Add(int64(len(ch.b)))
		}
		src.Close()
		dst.Close()
		for range q {
		}
	}()
	for {
		buf := make([]byte, 32<<10)
		n, err := src.Read(buf)
		if n > 0 {
			q <- chunk{buf[:n], time.Now().Add(p.delay)}
		}
		if err != nil {
			break
		}
	}
	close(q)
	<-done
}

// setCut cuts the link (dropping its connections) or heals it.
func (p *proxy) setCut(cut bool) {
	p.mu.Lock()
	p.cut = cut
	var open []net.Conn
	if cut {
		for c := range p.conns {
			open = append(open, c)
		}
	}
	p.mu.Unlock()
	for _, c := range open {
		c.Close()
	}
}

func (p *proxy) close() {
	p.ln.Close()
	p.setCut(true)
	p.wg.Wait()
}
