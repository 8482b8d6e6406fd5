package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"sync"
	"time"
)

// loadConfig is what the load subcommand drives.
type loadConfig struct {
	url         string
	path        string
	method      string
	token       string
	rps         int
	duration    time.Duration
	concurrency int
	log         string // append a Combined Log Format line per answer to this file
}

func parseLoadFlags(args []string, stderr io.Writer) (loadConfig, error) {
	var c loadConfig
	fs := flag.NewFlagSet("load", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), `Usage: demo load [flags]

Sends -rps requests a second to the demo for -duration and prints, per
second, how many were sent and answered 200, 429 or otherwise, and the
Retry-After values seen; then a summary. Stop early with Ctrl-C.

Flags:
`)
		fs.PrintDefaults()
	}
	fs.StringVar(&c.url, "url", "http://127.0.0.1:8080", "base URL of the demo server")
	fs.StringVar(&c.path, "path", "/health", "request path")
	fs.StringVar(&c.method, "method", http.MethodGet, "request method")
	fs.StringVar(&c.token, "token", "", "demo account to authenticate as (alice, bob, admin, root); empty is anonymous")
	fs.IntVar(&c.rps, "rps", 10, "requests per second")
	fs.DurationVar(&c.duration, "duration", 10*time.Second, "how long to send")
	fs.IntVar(&c.concurrency, "concurrency", 4, "requests in flight at most")
	fs.StringVar(&c.log, "log", "", "append each answered request to this file in Combined Log Format (for slidelimit replay)")
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	switch {
	case c.rps < 1:
		return c, errors.New("load: -rps must be at least 1")
	case c.concurrency < 1:
		return c, errors.New("load: -concurrency must be at least 1")
	case c.duration <= 0:
		return c, errors.New("load: -duration must be positive")
	}
	return c, nil
}

// loadStats counts the responses of one interval.
type loadStats struct {
	sent, ok, limited, other int
	minRetry, maxRetry       int // seconds; -1 when no Retry-After was seen
}

func newLoadStats() loadStats { return loadStats{minRetry: -1, maxRetry: -1} }

func (s *loadStats) add(o loadStats) {
	s.sent += o.sent
	s.ok += o.ok
	s.limited += o.limited
	s.other += o.other
	if o.minRetry >= 0 && (s.minRetry < 0 || o.minRetry < s.minRetry) {
		s.minRetry = o.minRetry
	}
	if o.maxRetry > s.maxRetry {
		s.maxRetry = o.maxRetry
	}
}

func (s loadStats) retry() string {
	if s.minRetry < 0 {
		return "-"
	}
	return fmt.Sprintf("%ds..%ds", s.minRetry, s.maxRetry)
}

// runLoad sends c.rps requests per second for c.duration and prints one row
// per second and a summary to out.
func runLoad(ctx context.Context, c loadConfig, client *http.Client, out io.Writer) error {
	ctx, cancel := context.WithTimeout(ctx, c.duration)
	defer cancel()

	var mu sync.Mutex
	cur, total := newLoadStats(), newLoadStats()
	record := func(code int, retry string) {
		one := newLoadStats()
		one.sent = 1
		switch code {
		case http.StatusOK:
			one.ok = 1
		case http.StatusTooManyRequests:
			one.limited = 1
		default:
			one.other = 1
		}
		if n, err := strconv.Atoi(retry); err == nil && n >= 0 {
			one.minRetry, one.maxRetry = n, n
		}
		mu.Lock()
		cur.add(one)
		mu.Unlock()
	}

	who := "anonymous"
	if c.token != "" {
		who = "Bearer " + c.token
	}
	fmt.Fprintf(out, "%s %s%s at %d/s for %s as %s\n", c.method, c.url, c.path, c.rps, c.duration, who)
	fmt.Fprintf(out, "%4s %6s %6s %6s %6s  %s\n", "sec", "sent", "200", "429", "other", "retry-after")
	flush := func(sec int) {
		mu.Lock()
		row := cur
		cur = newLoadStats()
		mu.Unlock()
		total.add(row)
		fmt.Fprintf(out, "%4d %6d %6d %6d %6d  %s\n", sec, row.sent, row.ok, row.limited, row.other, row.retry())
	}

	var alog *accessLog
	if c.log != "" {
		f, err := os.OpenFile(c.log, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
		if err != nil {
			return fmt.Errorf("load: %w", err)
		}
		defer f.Close()
		alog = &accessLog{w: f}
	}
	jobs := make(chan struct{})
	var wg sync.WaitGroup
	for range c.concurrency {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range jobs {
				start := time.Now()
				code, retry, size := send(ctx, client, c)
				if code == 0 && ctx.Err() != nil {
					continue // cut off by the end of the run, not an answer
				}
				if code != 0 {
					alog.write(start, c.token, c.method, c.path, code, size)
				}
				record(code, retry)
			}
		}()
	}

	tick := time.NewTicker(time.Second / time.Duration(c.rps))
	defer tick.Stop()
	second := time.NewTicker(time.Second)
	defer second.Stop()
	sec := 0
loop:
	for {
		select {
		case <-ctx.Done():
			break loop
		case <-second.C:
			sec++
			flush(sec)
		case <-tick.C:
			select {
			case jobs <- struct{}{}:
			default: // every worker is busy: the server is slower than -rps allows
			}
		}
	}
	close(jobs)
	wg.Wait()
	if cur.sent > 0 {
		flush(sec + 1)
	}
	fmt.Fprintf(out, "summary: sent %d, 200: %d, 429: %d, other: %d, retry-after %s\n",
		total.sent, total.ok, total.limited, total.other, total.retry())
	return nil
}

// send makes one request and returns its status (0 on a transport error),
// its Retry-After header and the size of its body.
func send(ctx context.Context, client *http.Client, c loadConfig) (int, string, int64) {
	req, err := http.NewRequestWithContext(ctx, c.method, c.url+c.path, nil)
	if err != nil {
		return 0, "", 0
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	resp, err := client.Do(req)
	if err != nil {
		return 0, "", 0
	}
	defer resp.Body.Close()
	n, _ := io.Copy(io.Discard, resp.Body)
	return resp.StatusCode, resp.Header.Get("Retry-After"), n
}
