package slidelimit

import (
	"context"
	_ "embed"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/slidelimit/slidelimit/internal/access"
)

// turnScript orders the heads of one lane across the fleet; its header
// specifies its keys, arguments, reply and messages.
//
//go:embed throttle_turn.lua
var turnSource string

var turnScript = redis.NewScript(turnSource)

// fleetLease is how long a participant's entry in a lane's queue lives
// without a renewal: a process that died holding the turn holds it that
// long at most.
const fleetLease = 3 * time.Second

// finishTimeout bounds the background finish of a Permit and the give
// back of a Wait whose context ended.
const finishTimeout = 5 * time.Second

// fleet is a throttle's share of the fleet-wide order: its participant
// id, the channel where the participants tell each other whose turn it
// is, and the Redis clock.
type fleet struct {
	t       *Throttle
	client  redis.Scripter
	prefix  string
	channel string
	member  string
	offset  atomic.Int64 // Redis clock minus local clock, µs

	clockMu sync.Mutex
	bestRTT time.Duration // the round trip of the sample offset came from
	bestAt  time.Time     // when it was taken; zero before the first
	ps      *redis.PubSub
	done    chan struct{}
	once    sync.Once
}

type subscriber interface {
	Subscribe(ctx context.Context, channels ...string) *redis.PubSub
}

// newFleet subscribes to the throttle's channel; without one (a client
// that cannot subscribe) the waiters renew their entries instead of being
// told, so order holds at the cost of a call per lease.
func newFleet(t *Throttle) *fleet {
	prefix := access.EnginePrefix(t.lim.engine)
	f := &fleet{
		t:       t,
		prefix:  prefix,
		channel: prefix + "throttle:" + t.name,
		member:  strconv.FormatUint(rand.Uint64(), 36),
		done:    make(chan struct{}),
	}
	f.client, _ = t.lim.client.(redis.Scripter)
	if s, ok := t.lim.client.(subscriber); ok {
		f.ps = s.Subscribe(context.Background(), f.channel)
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_, _ = f.ps.Receive(ctx) // the confirmation; a slow Redis only delays messages
		cancel()
		go f.listen()
	} else {
		close(f.done)
	}
	return f
}

// close stops listening.
func (f *fleet) close() {
	f.once.Do(func() {
		if f.ps != nil {
			_ = f.ps.Close()
			<-f.done
		}
	})
}

// now is the time on the Redis clock, µs, as well as this process knows it.
func (f *fleet) now() int64 { return time.Now().UnixMicro() + f.offset.Load() }

// clockDrift is how fast an offset learned from Redis is assumed to go
// stale (100 ppm, well above the drift of real clocks): a sample with a
// longer round trip replaces an older one once the old one's age has made
// it as uncertain.
const clockDrift = 10000

// clock learns the Redis clock from a reply Redis made after start. Redis
// read its clock somewhere within the round trip, so a sample is taken as
// read at its middle, and is off by at most half the round trip. Only a
// sample at least as precise as the one in use (allowing for its age)
// replaces it: on a loaded machine one slow reply would otherwise move
// this process's arrival stamps by a whole round trip, ahead of callers
// that arrived before them in other processes.
func (f *fleet) clock(redisTime, start time.Time) {
	if redisTime.IsZero() {
		return
	}
	now := time.Now()
	rtt := now.Sub(start)
	f.clockMu.Lock()
	defer f.clockMu.Unlock()
	if !f.bestAt.IsZero() && rtt > f.bestRTT+now.Sub(f.bestAt)/clockDrift*2 {
		return
	}
	f.bestRTT, f.bestAt = rtt, now
	f.offset.Store(redisTime.UnixMicro() - start.Add(rtt/2).UnixMicro())
}

func (f *fleet) keys(ln *lane) []string {
	base := f.prefix + "throttle:{" + f.t.name + ":" + ln.id + "}:"
	return []string{base + "q", base + "l", base + "b", base + "v"}
}

// run calls the turn script; it returns nil when Redis failed, and the
// waiters then go on by their timers.
func (f *fleet) run(ln *lane, op string, score int64, arg int64) []int64 {
	if f.client == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	f.t.stats.calls.Add(1)
	start := time.Now()
	res, err := turnScript.Run(ctx, f.client, f.keys(ln), op, f.member, score,
		fleetLease.Microseconds(), f.channel, ln.id, arg).Int64Slice()
	if err != nil || len(res) != 6 {
		return nil
	}
	f.clock(time.UnixMicro(res[5]), start)
	return res
}

// join puts (or renews) this process's entry for ln with its head's
// arrival stamp, and learns whether it has the turn.
func (f *fleet) join(ln *lane, stamp int64) {
	res := f.run(ln, "j", stamp, 0)
	f.apply(ln, res, true)
}

// pass moves this process's entry to the arrival of its next head (stamp),
// or out of the queue (stamp < 0), telling the new first to ask after
// hint.
func (f *fleet) pass(ln *lane, stamp int64, hint time.Duration) {
	res := f.run(ln, "p", stamp, hint.Microseconds())
	f.apply(ln, res, stamp >= 0)
}

// apply notes a reply of the turn script.
func (f *fleet) apply(ln *lane, res []int64, joined bool) {
	ln.mu.Lock()
	defer ln.mu.Unlock()
	ln.renewed = time.Now()
	if res != nil && !ln.fresh(res[4]) {
		// A message made after this reply was applied already; it told
		// what this reply would, and more.
		ln.signalHead()
		return
	}
	if res == nil {
		// Redis failed: act as if alone, so that waiters are not stuck
		// (and do not retry the script at once).
		ln.joined, ln.onTurn, ln.othersMin = false, false, none
		ln.signalHead()
		return
	}
	ln.joined = joined
	ln.onTurn = joined && res[0] == 1
	ln.othersMin = none
	if res[1] >= 0 {
		ln.othersMin = res[1]
	}
	if res[3] > 0 && ln.heard(res[3]) {
		go f.shorten(ln)
	}
	ln.signalHead()
}

// learn reads, for a lane this process has not used yet, whether an
// upstream block holds it and whether other processes wait in it: a first
// caller must then queue behind them instead of asking at once.
func (f *fleet) learn(ln *lane) {
	res := f.run(ln, "g", 0, 0)
	if len(res) != 6 {
		return
	}
	ln.mu.Lock()
	defer ln.mu.Unlock()
	if res[3] > 0 && ln.heard(res[3]) {
		go f.shorten(ln)
	}
	if res[1] >= 0 && res[1] < ln.othersMin {
		ln.othersMin = res[1]
	}
}

// block holds ln, in every process, for d.
func (f *fleet) block(ln *lane, d time.Duration) {
	ms := max(d.Milliseconds(), 1)
	ln.mu.Lock()
	ln.holdUntil(time.Now().Add(d))
	ln.mu.Unlock()
	f.run(ln, "b", 0, ms)
	f.listBlock(ln, ms)
}

// listen applies the messages of the other participants.
func (f *fleet) listen() {
	defer close(f.done)
	for msg := range f.ps.Channel() {
		if line, ok := strings.CutPrefix(msg.Payload, "u|"); ok {
			f.t.unblock(line) // a Reset lifted the blocks of a subject
			continue
		}
		parts := strings.Split(msg.Payload, "|")
		if len(parts) < 2 {
			continue
		}
		f.t.mu.Lock()
		ln := f.t.byID[parts[1]]
		f.t.mu.Unlock()
		if ln == nil {
			continue
		}
		f.message(ln, parts)
	}
}

func (f *fleet) message(ln *lane, parts []string) {
	num := func(i int) int64 {
		if i >= len(parts) {
			return -1
		}
		n, err := strconv.ParseInt(parts[i], 10, 64)
		if err != nil {
			return -1
		}
		return n
	}
	ln.mu.Lock()
	defer ln.mu.Unlock()
	switch parts[0] {
	case "j":
		if len(parts) == 5 && parts[2] != f.member && ln.fresh(num(4)) {
			if s := num(3); s >= 0 && s < ln.othersMin {
				ln.othersMin = s
			}
		}
	case "t":
		if len(parts) != 7 || !ln.fresh(num(6)) {
			return
		}
		if parts[2] != f.member {
			// Another process has the turn now.
			ln.othersMin, ln.onTurn = num(5), false
			return
		}
		if !ln.joined {
			return
		}
		ln.onTurn = true
		ln.othersMin = none
		if o := num(4); o >= 0 {
			ln.othersMin = o
		}
		ln.wakeAt = time.Now().Add(time.Duration(max(num(3), 0)) * time.Microsecond)
		ln.signalHead()
	case "e":
		if len(parts) != 3 || !ln.fresh(num(2)) {
			return
		}
		ln.othersMin = none
		ln.signalHead()
	case "b":
		if ms := num(2); ms > 0 {
			ln.heard(ms)
			ln.signalHead()
		}
	}
}
