package main

import (
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"
)

// upstream enforces limit calls per period, exactly, on arrivals, for
// each API key on its own (the X-Key header; one key without it), and
// tokens per period over all of them when tokens is not 0.
type upstream struct {
	limit   int
	tokens  int64 // 0: no token limit
	period  time.Duration
	respond time.Duration // answers 0..respond after counting
	blockAt time.Time     // the first call on k0 from then on is answered 429 (zero: never)
	blockD  int           // with Retry-After of this many seconds

	mu       sync.Mutex
	logs     map[string]*keyLog // by key: accepted arrivals within period
	n        int64
	used     int64     // tokens accepted
	accepted []arrival // every accepted arrival
	arrivals []arrival // every arrival, accepted or not
	refused  int       // 429s for the limits (not the block's)
	waits    []wait    // the workers' waits, from the children
	block    blockRec  // the block of k0, once made
}

// keyLog is a key's accepted arrivals within the period, oldest first.
type keyLog struct {
	at   []time.Time
	cost []int64
}

// arrival is a call at the upstream.
type arrival struct {
	at, admitted   time.Time // admitted: the throttle's admission (Redis time)
	class, tenant  string
	key            string
	proc           int
	blocked, other bool // answered by the block; sent by another process than the blocked call's
}

// blockRec is the block the upstream made on k0.
type blockRec struct {
	proc      int // the process whose call was answered with it
	from, end time.Time
}

// wait is one Wait (or WaitAny) of a worker: [from, to), admitted or not.
type wait struct {
	class, tenant string
	from, to      time.Time
	ok            bool
}

func (u *upstream) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch r.URL.Path {
	case "/warm":
		return
	case "/waits":
		u.addWaits(r.Body)
		return
	}
	now := time.Now()
	a := arrival{at: now, class: r.Header.Get("X-Class"), tenant: r.Header.Get("X-Tenant"), key: r.Header.Get("X-Key")}
	a.proc, _ = strconv.Atoi(r.Header.Get("X-Proc"))
	if us, err := strconv.ParseInt(r.Header.Get("X-Admitted"), 10, 64); err == nil {
		a.admitted = time.UnixMicro(us)
	}
	status, tokens, retry := u.count(&a)
	if u.respond > 0 {
		time.Sleep(time.Duration(rand.Int64N(int64(u.respond))))
	}
	if status != http.StatusOK {
		w.Header().Set("Retry-After", strconv.Itoa(retry))
		w.WriteHeader(status)
		return
	}
	w.Header().Set("X-Usage-Tokens", strconv.FormatInt(tokens, 10))
	io.WriteString(w, "ok")
}

// count counts arrival a and returns the answer's status, the tokens the
// call used, and the Retry-After of a 429.
func (u *upstream) count(a *arrival) (int, int64, int) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.logs == nil {
		u.logs = map[string]*keyLog{}
	}
	if a.key == "k0" && u.blockD > 0 && !u.blockAt.IsZero() && !a.at.Before(u.blockAt) {
		if u.block.end.IsZero() {
			u.block = blockRec{proc: a.proc, from: a.at, end: a.at.Add(time.Duration(u.blockD) * time.Second)}
		}
		if a.at.Before(u.block.end) {
			a.blocked, a.other = true, a.proc != u.block.proc
			u.arrivals = append(u.arrivals, *a)
			return http.StatusTooManyRequests, 0, max(1, int(time.Until(u.block.end).Seconds()+0.999))
		}
	}
	u.arrivals = append(u.arrivals, *a)
	var inWindow int64
	for _, l := range u.logs {
		l.trim(a.at, u.period)
		for _, c := range l.cost {
			inWindow += c
		}
	}
	l := u.logs[a.key]
	if l == nil {
		l = &keyLog{}
		u.logs[a.key] = l
	}
	u.n++
	tokens := 50 + u.n*37%101 // 50..150, known only here
	if len(l.at) >= u.limit || u.tokens > 0 && inWindow+tokens > u.tokens {
		u.refused++
		return http.StatusTooManyRequests, 0, 1
	}
	l.at, l.cost = append(l.at, a.at), append(l.cost, tokens)
	u.used += tokens
	u.accepted = append(u.accepted, *a)
	return http.StatusOK, tokens, 0
}

// trim drops the arrivals a period or more before now.
func (l *keyLog) trim(now time.Time, period time.Duration) {
	i := 0
	for i < len(l.at) && now.Sub(l.at[i]) >= period {
		i++
	}
	l.at, l.cost = l.at[i:], l.cost[i:]
}

// addWaits reads a child's waits: lines of "class tenant from to ok"
// (µs; "-" for an empty class or tenant).
func (u *upstream) addWaits(body io.Reader) {
	data, _ := io.ReadAll(body)
	u.mu.Lock()
	defer u.mu.Unlock()
	for line := range strings.Lines(string(data)) {
		var class, tenant string
		var from, to int64
		var ok bool
		if _, err := fmt.Sscan(line, &class, &tenant, &from, &to, &ok); err != nil {
			continue
		}
		u.waits = append(u.waits, wait{class: dash(class), tenant: dash(tenant), from: time.UnixMicro(from), to: time.UnixMicro(to), ok: ok})
	}
}

// dash reads "-" as "".
func dash(s string) string {
	if s == "-" {
		return ""
	}
	return s
}
