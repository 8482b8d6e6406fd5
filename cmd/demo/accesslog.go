package main

import (
	"fmt"
	"io"
	"sync"
	"time"
)

// accessLog writes the requests of a load run in the Combined Log Format
// of Apache and nginx, one line per answered request, as a server's
// access log would hold them: what `slidelimit replay` reads (see
// docs/replay.md). It is safe for concurrent use.
type accessLog struct {
	mu sync.Mutex
	w  io.Writer
}

// write logs one request that started at start and was answered with
// status and size bytes of body; user is the demo account, "" anonymous.
func (l *accessLog) write(start time.Time, user, method, path string, status int, size int64) {
	if l == nil {
		return
	}
	if user == "" {
		user = "-"
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	fmt.Fprintf(l.w, "127.0.0.1 - %s [%s] \"%s %s HTTP/1.1\" %d %d \"-\" \"demo-load\"\n",
		user, start.Format("02/Jan/2006:15:04:05 -0700"), method, path, status, size)
}
