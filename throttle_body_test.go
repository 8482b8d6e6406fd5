package slidelimit_test

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/slidelimit/slidelimit"
)

// waitUsed waits until rule id of scope holds want for subject in its
// first window (a settlement leaves within about 1 ms), failing after 5 s.
func waitUsed(t *testing.T, lim *slidelimit.Limiter, scope, id, subject string, want int64) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		d, err := lim.Peek(context.Background(), scope, id, subject, false)
		if err != nil {
			t.Fatal(err)
		}
		if d.Windows[0].Used == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s of %s holds %d, want %d", id, scope, d.Windows[0].Used, want)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// usage reads total_tokens from a JSON completion, or from the last event
// of a server-sent-events stream that carries usage.
func usage(_ *http.Response, body []byte) map[string]int64 {
	type withUsage struct {
		Usage *struct {
			TotalTokens int64 `json:"total_tokens"`
		} `json:"usage"`
	}
	var total int64 = -1
	if bytes.HasPrefix(bytes.TrimSpace(body), []byte("{")) {
		var u withUsage
		if json.Unmarshal(body, &u) == nil && u.Usage != nil {
			total = u.Usage.TotalTokens
		}
	}
	for line := range strings.Lines(string(body)) {
		data, ok := strings.CutPrefix(line, "data: ")
		if !ok || !strings.HasSuffix(data, "\n") {
			continue
		}
		var u withUsage
		if json.Unmarshal([]byte(data), &u) == nil && u.Usage != nil {
			total = u.Usage.TotalTokens
		}
	}
	if total < 0 {
		return nil
	}
	return map[string]int64{"tokens": total}
}

// tokenClient is an http.Client through a throttle of 1,000,000 tokens a
// minute per key, estimating 4,000 tokens a call for key k1, with opts.
func tokenClient(t *testing.T, opts ...slidelimit.TransportOption) (*http.Client, *slidelimit.Limiter) {
	t.Helper()
	lim := throttleLimiter(t, miniClient(t), randomPrefix(t))
	th, err := lim.Throttle("llm", "key(apikey):1000/min; key(apikey)[tokens]:1000000/min")
	if err != nil {
		t.Fatal(err)
	}
	opts = append([]slidelimit.TransportOption{slidelimit.WithCall(func(*http.Request) (slidelimit.Call, error) {
		return slidelimit.Call{Keys: map[string]string{"apikey": "k1"}, Costs: map[string]int64{"tokens": 4000}}, nil
	})}, opts...)
	return &http.Client{Transport: th.Transport(nil, opts...)}, lim
}

// get reads the whole body of url through hc and closes it.
func get(t *testing.T, hc *http.Client, url string) []byte {
	t.Helper()
	resp, err := hc.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if err := resp.Body.Close(); err != nil {
		t.Fatal(err)
	}
	return b
}

// TestThrottleActualBodyJSON: the tokens of a JSON completion are settled
// to its usage, which fn reads from the whole body, once.
func TestThrottleActualBodyJSON(t *testing.T) {
	const completion = `{"id":"c1","choices":[{"message":{"content":"hi"}}],"usage":{"prompt_tokens":30,"completion_tokens":12,"total_tokens":42}}`
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, completion)
	}))
	defer srv.Close()
	var calls atomic.Int32
	var seen atomic.Value
	hc, lim := tokenClient(t, slidelimit.WithActualBody(func(resp *http.Response, body []byte) map[string]int64 {
		calls.Add(1)
		seen.Store(string(body))
		if resp.StatusCode != http.StatusOK {
			t.Errorf("fn saw status %d", resp.StatusCode)
		}
		return usage(resp, body)
	}))
	if got := string(get(t, hc, srv.URL)); got != completion {
		t.Fatalf("the caller read %q", got)
	}
	waitUsed(t, lim, "llm", "key(apikey)[tokens]", "k1", 42)
	if n := calls.Load(); n != 1 {
		t.Errorf("fn ran %d times, want 1", n)
	}
	if got := seen.Load(); got != completion {
		t.Errorf("fn saw %q, want the whole body", got)
	}
}

// TestThrottleActualBodyStream: a server-sent-events stream, read as it
// comes, is settled to the usage of its last data event before [DONE].
func TestThrottleActualBodyStream(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		for i := range 20 {
			fmt.Fprintf(w, "data: {\"choices\":[{\"delta\":{\"content\":\"w%d \"}}],\"usage\":null}\n\n", i)
			w.(http.Flusher).Flush()
		}
		io.WriteString(w, "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":40,\"completion_tokens\":17,\"total_tokens\":57}}\n\n")
		io.WriteString(w, "data: [DONE]\n\n")
	}))
	defer srv.Close()
	hc, lim := tokenClient(t, slidelimit.WithActualBody(usage))
	resp, err := hc.Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	events := 0
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if strings.HasPrefix(sc.Text(), "data: ") {
			events++
		}
	}
	resp.Body.Close()
	if events != 22 {
		t.Fatalf("the caller read %d events, want 22", events)
	}
	waitUsed(t, lim, "llm", "key(apikey)[tokens]", "k1", 57)
}

// TestThrottleActualBodyTail: fn sees a body of at most 1 MiB whole, and
// the last 1 MiB of a longer one, in order, whatever the sizes of the
// caller's reads.
func TestThrottleActualBodyTail(t *testing.T) {
	const mib = 1 << 20
	sizes := []int{0, 200, mib, mib + 1, 3*mib + 17}
	bodies := make(map[string][]byte)
	for _, n := range sizes {
		b := make([]byte, n)
		for i := range b {
			b[i] = byte(rand.IntN(256))
		}
		bodies[strconv.Itoa(n)] = b
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Write(bodies[r.URL.Query().Get("n")])
	}))
	defer srv.Close()
	var seen []byte
	hc, _ := tokenClient(t, slidelimit.WithActualBody(func(_ *http.Response, body []byte) map[string]int64 {
		seen = body
		return nil
	}))
	for _, n := range sizes {
		resp, err := hc.Get(srv.URL + "?n=" + strconv.Itoa(n))
		if err != nil {
			t.Fatal(err)
		}
		// Reads of odd sizes, so that the kept tail wraps mid-read.
		var read []byte
		buf := make([]byte, 7919)
		for {
			k, err := resp.Body.Read(buf[:1+rand.IntN(len(buf))])
			read = append(read, buf[:k]...)
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
		}
		resp.Body.Close()
		want := bodies[strconv.Itoa(n)]
		if !bytes.Equal(read, want) {
			t.Fatalf("n=%d: the caller read %d bytes, not the body", n, len(read))
		}
		want = want[max(0, len(want)-mib):]
		if !bytes.Equal(seen, want) {
			t.Errorf("n=%d: fn saw %d bytes, want the last %d of the body", n, len(seen), len(want))
		}
	}
}

// TestThrottleActualBodyPartial: fn sees what the caller read of a body it
// closed before the end, or whose read failed; without usage there the
// call keeps its estimate.
func TestThrottleActualBodyPartial(t *testing.T) {
	const completion = `{"choices":[{"message":{"content":"hello"}}],"usage":{"total_tokens":42}}`
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/broken" {
			w.Header().Set("Content-Length", "1000")
			io.WriteString(w, completion[:30])
			w.(http.Flusher).Flush()
			panic(http.ErrAbortHandler) // the connection breaks mid-body
		}
		io.WriteString(w, completion)
	}))
	defer srv.Close()
	var seen atomic.Value
	hc, lim := tokenClient(t, slidelimit.WithActualBody(func(resp *http.Response, body []byte) map[string]int64 {
		seen.Store(string(body))
		return usage(resp, body)
	}))

	resp, err := hc.Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	head := make([]byte, 20)
	if _, err := io.ReadFull(resp.Body, head); err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if got := seen.Load(); got != completion[:20] {
		t.Errorf("fn saw %q, want the 20 bytes read", got)
	}
	waitUsed(t, lim, "llm", "key(apikey)[tokens]", "k1", 4000)

	resp, err = hc.Get(srv.URL + "/broken")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadAll(resp.Body); !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Errorf("reading the broken body: %v, want io.ErrUnexpectedEOF", err)
	}
	resp.Body.Close()
	if got := seen.Load(); got != completion[:30] {
		t.Errorf("fn saw %q, want the 30 bytes read before the error", got)
	}
	waitUsed(t, lim, "llm", "key(apikey)[tokens]", "k1", 8000)
}

// TestThrottleActualBodyCloseDuringRead: a Close while another goroutine
// reads finishes the call once; bytes read after it are not passed.
func TestThrottleActualBodyCloseDuringRead(t *testing.T) {
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "data: first\n\n")
		w.(http.Flusher).Flush()
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	defer srv.Close()
	defer close(release)
	var calls atomic.Int32
	var seen atomic.Value
	hc, lim := tokenClient(t, slidelimit.WithActualBody(func(_ *http.Response, body []byte) map[string]int64 {
		calls.Add(1)
		seen.Store(string(body))
		return map[string]int64{"tokens": int64(len(body))}
	}))
	resp, err := hc.Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	first := make([]byte, len("data: first\n\n"))
	if _, err := io.ReadFull(resp.Body, first); err != nil {
		t.Fatal(err)
	}
	done := make(chan error)
	go func() {
		_, err := resp.Body.Read(make([]byte, 64)) // blocks until Close
		done <- err
	}()
	var wg sync.WaitGroup
	for range 3 {
		wg.Go(func() { resp.Body.Close() })
	}
	wg.Wait()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Close did not end the pending Read")
	}
	if n := calls.Load(); n != 1 {
		t.Errorf("fn ran %d times for 3 Closes, want 1", n)
	}
	if got := seen.Load(); got != string(first) {
		t.Errorf("fn saw %q", got)
	}
	waitUsed(t, lim, "llm", "key(apikey)[tokens]", "k1", int64(len(first)))
}

// TestThrottleActualBodyAndHeader: with WithActual and WithActualBody both
// run; the body's value wins for the names it sets, WithActual's stays for
// the others.
func TestThrottleActualBodyAndHeader(t *testing.T) {
	lim := throttleLimiter(t, miniClient(t), randomPrefix(t))
	th, err := lim.Throttle("llm", "global[tokens]:100000/min; global[images]:1000/min")
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Tokens", "900")
		w.Header().Set("X-Images", "3")
		io.WriteString(w, `{"usage":{"total_tokens":42}}`)
	}))
	defer srv.Close()
	hc := &http.Client{Transport: th.Transport(nil,
		slidelimit.WithCall(func(*http.Request) (slidelimit.Call, error) {
			return slidelimit.Call{Costs: map[string]int64{"tokens": 4000, "images": 10}}, nil
		}),
		slidelimit.WithActual(func(resp *http.Response) map[string]int64 {
			tokens, _ := strconv.ParseInt(resp.Header.Get("X-Tokens"), 10, 64)
			images, _ := strconv.ParseInt(resp.Header.Get("X-Images"), 10, 64)
			return map[string]int64{"tokens": tokens, "images": images}
		}),
		slidelimit.WithActualBody(usage),
	)}
	get(t, hc, srv.URL)
	waitUsed(t, lim, "llm", "global[tokens]", "", 42)
	waitUsed(t, lim, "llm", "global[images]", "", 3)
}

// TestThrottleActualBodyPanic: a panicking fn panics the caller's Close,
// runs once, and its call is finished with its estimate: the slot is
// released.
func TestThrottleActualBodyPanic(t *testing.T) {
	lim := throttleLimiter(t, miniClient(t), randomPrefix(t))
	th, err := lim.Throttle("llm", "global:1 concurrent; global[tokens]:100000/min")
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "{}") }))
	defer srv.Close()
	var calls atomic.Int32
	hc := &http.Client{Transport: th.Transport(nil,
		slidelimit.WithCall(func(*http.Request) (slidelimit.Call, error) {
			return slidelimit.Call{Costs: map[string]int64{"tokens": 4000}}, nil
		}),
		slidelimit.WithActualBody(func(*http.Response, []byte) map[string]int64 {
			calls.Add(1)
			panic("bad usage parser")
		}),
		slidelimit.WithActualBytes("tokens"),
	)}
	resp, err := hc.Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	io.ReadAll(resp.Body)
	closeBody := func() (p any) {
		defer func() { p = recover() }()
		resp.Body.Close()
		return nil
	}
	if p := closeBody(); p != "bad usage parser" {
		t.Errorf("Close recovered %v, want fn's panic", p)
	}
	if p := closeBody(); p != nil {
		t.Errorf("the second Close panicked: %v", p)
	}
	if n := calls.Load(); n != 1 {
		t.Errorf("fn ran %d times, want 1", n)
	}
	ctx := context.Background()
	deadline := time.Now().Add(5 * time.Second)
	for {
		p, ok, err := th.Allow(ctx, slidelimit.Call{Costs: map[string]int64{"tokens": 1}})
		if err != nil {
			t.Fatal(err)
		}
		if ok {
			p.Finish(nil)
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the slot of the call whose fn panicked was not released")
		}
		time.Sleep(5 * time.Millisecond)
	}
	// Its estimate, not the 2 bytes read, and the call of 1 after it.
	waitUsed(t, lim, "llm", "global[tokens]", "", 4001)
}

// TestThrottleActualBytes: downloads of unknown length (no Content-Length)
// through two processes (Limiters on one Redis) are settled to the bytes
// their callers read, estimated at 1: the windows every process sees hold
// them, and the next download waits for room.
func TestThrottleActualBytes(t *testing.T) {
	client := miniClient(t)
	prefix := randomPrefix(t)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n, _ := strconv.Atoi(r.URL.Query().Get("n"))
		chunk := bytes.Repeat([]byte("x"), 1000)
		for n > 0 {
			w.Write(chunk[:min(n, len(chunk))])
			w.(http.Flusher).Flush() // chunked: the client learns the size at the end
			n -= len(chunk)
		}
	}))
	defer srv.Close()
	var lims []*slidelimit.Limiter
	var ths []*slidelimit.Throttle
	var hcs []*http.Client
	for range 2 {
		lim := throttleLimiter(t, client, prefix)
		th, err := lim.Throttle("storage", "global[bytes]:100000/min")
		if err != nil {
			t.Fatal(err)
		}
		lims, ths = append(lims, lim), append(ths, th)
		hcs = append(hcs, &http.Client{Transport: th.Transport(nil,
			slidelimit.WithCall(func(*http.Request) (slidelimit.Call, error) {
				return slidelimit.Call{Costs: map[string]int64{"bytes": 1}}, nil // size unknown
			}),
			slidelimit.WithActualBytes("bytes"),
		)})
	}
	resp, err := hcs[0].Get(srv.URL + "?n=40500")
	if err != nil {
		t.Fatal(err)
	}
	if resp.ContentLength != -1 {
		t.Fatalf("ContentLength = %d, want unknown", resp.ContentLength)
	}
	waitUsed(t, lims[1], "storage", "global[bytes]", "", 1) // counted at its estimate while read
	if b := get(t, hcs[1], srv.URL+"?n=30000"); len(b) != 30000 {
		t.Fatalf("read %d bytes", len(b))
	}
	if b, err := io.ReadAll(resp.Body); err != nil || len(b) != 40500 {
		t.Fatalf("read %d bytes, %v", len(b), err)
	}
	resp.Body.Close()
	for _, lim := range lims {
		waitUsed(t, lim, "storage", "global[bytes]", "", 70500)
	}
	// A partial read settles to what was read.
	resp, err = hcs[1].Get(srv.URL + "?n=50000")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadFull(resp.Body, make([]byte, 20000)); err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	waitUsed(t, lims[0], "storage", "global[bytes]", "", 90500)
	// 9,500 bytes are left this minute: a call estimated at 10,000 waits.
	for i, th := range ths {
		if p, ok, err := th.Allow(context.Background(), slidelimit.Call{Costs: map[string]int64{"bytes": 10000}}); ok || err != nil {
			p.Finish(nil)
			t.Errorf("process %d admitted 10,000 bytes with 9,500 left (err %v)", i, err)
		}
	}
}

// TestThrottleActualBodyGzip: the functions see the body as the caller
// reads it, after http.Transport undid the gzip it asked for.
func TestThrottleActualBodyGzip(t *testing.T) {
	const completion = `{"choices":[{"message":{"content":"hi"}}],"usage":{"total_tokens":42}}`
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !strings.Contains(r.Header.Get("Accept-Encoding"), "gzip") {
			t.Error("the transport did not ask for gzip")
		}
		w.Header().Set("Content-Encoding", "gzip")
		zw := gzip.NewWriter(w)
		io.WriteString(zw, completion)
		zw.Close()
	}))
	defer srv.Close()
	var seen atomic.Value
	hc, lim := tokenClient(t, slidelimit.WithActualBody(func(resp *http.Response, body []byte) map[string]int64 {
		seen.Store(string(body))
		return usage(resp, body)
	}))
	if got := string(get(t, hc, srv.URL)); got != completion {
		t.Fatalf("the caller read %q", got)
	}
	if got := seen.Load(); got != completion {
		t.Errorf("fn saw %q, want the body as the caller read it", got)
	}
	waitUsed(t, lim, "llm", "key(apikey)[tokens]", "k1", 42)
}
