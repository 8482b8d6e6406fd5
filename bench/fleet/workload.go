package main

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/slidelimit/slidelimit"
)

// workers are n workers of one class and tenant in each process, each
// pausing 0..pause (random) after each call when pause is not 0 (else
// -pause).
type workers struct {
	class, tenant string
	n             int
	pause         time.Duration
}

// parseSpec returns the workers of each process: per class of classes
// ("critical:4,batch:20", or "critical:1:2s" for workers pausing up to 2 s
// after each call; "" for perClass workers of no class), spread over
// tenants (t0 with heavy times the workers of the others) when tenants >
// 0.
func parseSpec(classes string, perClass, tenants, heavy int) ([]workers, error) {
	type class struct {
		name  string
		n     int
		pause time.Duration
	}
	cs := []class{{"", perClass, 0}}
	if classes != "" {
		cs = nil
		for part := range strings.SplitSeq(classes, ",") {
			f := strings.Split(strings.TrimSpace(part), ":")
			var n int
			var pause time.Duration
			err := fmt.Errorf("want class:workers[:pause],... with workers >= 1")
			if len(f) == 2 || len(f) == 3 {
				n, err = strconv.Atoi(f[1])
			}
			if err == nil && len(f) == 3 {
				pause, err = time.ParseDuration(f[2])
			}
			if err != nil || n < 1 || f[0] == "" {
				return nil, fmt.Errorf("-classes %q: %v", classes, err)
			}
			cs = append(cs, class{f[0], n, pause})
		}
	}
	if tenants < 0 || heavy < 1 {
		return nil, fmt.Errorf("-tenants %d -heavy %d: want tenants >= 0, heavy >= 1", tenants, heavy)
	}
	var out []workers
	for _, c := range cs {
		if tenants == 0 {
			out = append(out, workers{class: c.name, n: c.n, pause: c.pause})
			continue
		}
		for t := range tenants {
			n := c.n
			if t == 0 {
				n *= heavy
			}
			out = append(out, workers{class: c.name, tenant: "t" + strconv.Itoa(t), n: n, pause: c.pause})
		}
	}
	return out, nil
}

// encodeSpec and decodeSpec pass the workers to a child:
// class/tenant/n/pause,...
func encodeSpec(spec []workers) string {
	var parts []string
	for _, w := range spec {
		parts = append(parts, w.class+"/"+w.tenant+"/"+strconv.Itoa(w.n)+"/"+w.pause.String())
	}
	return strings.Join(parts, ",")
}

func decodeSpec(s string) []workers {
	var out []workers
	for part := range strings.SplitSeq(s, ",") {
		f := strings.Split(part, "/")
		if len(f) != 4 {
			continue
		}
		n, _ := strconv.Atoi(f[2])
		pause, _ := time.ParseDuration(f[3])
		out = append(out, workers{class: f[0], tenant: f[1], n: n, pause: pause})
	}
	return out
}

func env(name string) string { return os.Getenv("FLEET_" + name) }

// child is one process of the fleet: its throttle and what its workers
// share.
type child struct {
	th      *slidelimit.Throttle
	hc      *http.Client
	url     string
	proc    string
	keys    int
	tokens  bool
	leave   float64
	pause   time.Duration
	delay   time.Duration
	ramp    time.Duration
	mu      sync.Mutex
	waits   strings.Builder
	workers int
}

func runChild() error {
	spec := decodeSpec(env("SPEC"))
	startUS, _ := strconv.ParseInt(env("START"), 10, 64)
	endUS, _ := strconv.ParseInt(env("END"), 10, 64)
	rdb := redis.NewClient(&redis.Options{Addr: env("REDIS"), ContextTimeoutEnabled: true})
	defer rdb.Close()
	transit, err := time.ParseDuration(env("TRANSIT"))
	if err != nil {
		return fmt.Errorf("FLEET_TRANSIT: %w", err)
	}
	lim, err := slidelimit.New(rdb, slidelimit.WithKeyPrefix(env("PREFIX")), slidelimit.WithTransitBound(transit))
	if err != nil {
		return err
	}
	defer lim.Close()
	ch := &child{url: env("URL"), proc: env("PROC"), tokens: strings.Contains(env("RULES"), "[tokens]")}
	if ch.th, err = lim.Throttle("fleet", env("RULES")); err != nil {
		return err
	}
	ch.keys, _ = strconv.Atoi(env("KEYS"))
	ch.leave, _ = strconv.ParseFloat(env("LEAVE"), 64)
	ch.pause, _ = time.ParseDuration(env("PAUSE"))
	ch.delay, _ = time.ParseDuration(env("DELAY"))
	ch.ramp, _ = time.ParseDuration(env("RAMP"))
	for _, w := range spec {
		ch.workers += w.n
	}
	base := &http.Transport{MaxIdleConnsPerHost: ch.workers, DialContext: (&net.Dialer{}).DialContext}
	defer base.CloseIdleConnections()
	ch.hc = &http.Client{Transport: base}
	ch.warm()
	time.Sleep(time.Until(time.UnixMicro(startUS)))
	ctx, cancel := context.WithDeadline(context.Background(), time.UnixMicro(endUS))
	defer cancel()
	var wg sync.WaitGroup
	errs := make(chan error, ch.workers)
	for _, w := range spec {
		for range w.n {
			wg.Go(func() {
				if err := ch.work(ctx, w); err != nil {
					errs <- err
				}
			})
		}
	}
	wg.Wait()
	close(errs)
	if resp, err := http.Post(ch.url+"/waits", "text/plain", strings.NewReader(ch.waits.String())); err == nil {
		resp.Body.Close()
	}
	var msgs []string
	for err := range errs {
		msgs = append(msgs, err.Error())
	}
	if len(msgs) > 0 {
		return fmt.Errorf("%d waits failed: %s", len(msgs), msgs[0])
	}
	return nil
}

// warm opens a connection to the upstream per worker.
func (ch *child) warm() {
	var warm sync.WaitGroup
	for range ch.workers {
		warm.Go(func() {
			if resp, err := ch.hc.Get(ch.url + "/warm"); err == nil {
				resp.Body.Close()
			}
		})
	}
	warm.Wait()
}

// calls returns the calls a worker of class and tenant waits for: one on
// key k1, or one per key k0.. for WaitAny.
func (ch *child) calls(class, tenant string) ([]slidelimit.Call, []string) {
	var keys []string
	if ch.keys <= 1 {
		keys = []string{"k1"}
	} else {
		for i := range ch.keys {
			keys = append(keys, "k"+strconv.Itoa(i))
		}
	}
	var out []slidelimit.Call
	for _, k := range keys {
		c := slidelimit.Call{Keys: map[string]string{"apikey": k}, Class: class, Tenant: tenant}
		if ch.tokens {
			c.Costs = map[string]int64{"tokens": 150}
		}
		out = append(out, c)
	}
	return out, keys
}

// work calls the upstream in a loop until ctx ends: wait, send, finish,
// and pause.
func (ch *child) work(ctx context.Context, w workers) error {
	class, tenant, pause := w.class, w.tenant, cmp.Or(w.pause, ch.pause)
	calls, keys := ch.calls(class, tenant)
	if ch.ramp > 0 {
		select {
		case <-ctx.Done():
		case <-time.After(time.Duration(rand.Int64N(int64(ch.ramp)))):
		}
	}
	for ctx.Err() == nil {
		wctx, wcancel := ctx, context.CancelFunc(func() {})
		if rand.Float64() < ch.leave {
			wctx, wcancel = context.WithTimeout(ctx, time.Duration(rand.Int64N(int64(300*time.Millisecond))))
		}
		arrived := time.Now()
		var p *slidelimit.Permit
		var i int
		var err error
		if len(calls) == 1 {
			p, err = ch.th.Wait(wctx, calls[0])
		} else {
			p, i, err = ch.th.WaitAny(wctx, calls...)
		}
		end := time.Now()
		if d, ok := wctx.Deadline(); ok && d.Before(end) {
			end = d // not a waiter once its context ended
		}
		if err == nil {
			end = p.Decision().Time
		}
		ch.mu.Lock()
		fmt.Fprintf(&ch.waits, "%s %s %d %d %t\n", orDash(class), orDash(tenant), arrived.UnixMicro(), end.UnixMicro(), err == nil)
		ch.mu.Unlock()
		wcancel()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			if wctx.Err() == nil {
				return err
			}
			continue
		}
		ch.send(p, class, tenant, keys[i])
		if pause > 0 {
			select {
			case <-ctx.Done():
			case <-time.After(time.Duration(rand.Int64N(int64(pause)))):
			}
		}
	}
	return nil
}

// send makes the call p admitted, after a transit of 0..delay, teaches
// the throttle the upstream's answer (a learned block) and finishes p
// with the tokens the upstream says it used.
func (ch *child) send(p *slidelimit.Permit, class, tenant, key string) {
	if ch.delay > 0 {
		time.Sleep(time.Duration(rand.Int64N(int64(ch.delay))))
	}
	req, _ := http.NewRequest(http.MethodGet, ch.url, nil)
	req.Header.Set("X-Admitted", strconv.FormatInt(p.Decision().Time.UnixMicro(), 10))
	req.Header.Set("X-Class", class)
	req.Header.Set("X-Tenant", tenant)
	req.Header.Set("X-Key", key)
	req.Header.Set("X-Proc", ch.proc)
	resp, err := ch.hc.Do(req)
	var actual map[string]int64
	if err == nil {
		p.Learn(resp) // a 429's Retry-After blocks the key in every process
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if n, err := strconv.ParseInt(resp.Header.Get("X-Usage-Tokens"), 10, 64); err == nil && ch.tokens {
			actual = map[string]int64{"tokens": n}
		}
	}
	p.Finish(actual)
}

// orDash writes "" as "-".
func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
