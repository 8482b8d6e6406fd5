package throttle

import (
	"context"
	_ "embed"
	"math"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// turnScript orders the heads of one lane across the fleet; its header
// specifies its keys, arguments, reply and messages.
//
//go:embed turn.lua
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
	seq     atomic.Int64 // the last sequence number given to a 'j' or 'p'

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
	prefix := t.eng.KeyPrefix()
	f := &fleet{
		t:       t,
		prefix:  prefix,
		channel: prefix + "throttle:" + t.name,
		member:  strconv.FormatUint(rand.Uint64(), 36),
		done:    make(chan struct{}),
	}
	f.client, _ = t.client.(redis.Scripter)
	if s, ok := t.client.(subscriber); ok {
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
	return []string{base + "q", base + "l", base + "b", base + "v", base + "s", base + "f", base + "m"}
}

// run calls the turn script; it returns nil when Redis failed, and the
// waiters then go on by their timers. seq numbers a 'j' or 'p' (next).
func (f *fleet) run(ln *lane, op string, score, arg, seq int64) []int64 {
	if f.client == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	f.t.stats.calls.Add(1)
	start := time.Now()
	res, err := turnScript.Run(ctx, f.client, f.keys(ln), op, f.member, score,
		fleetLease.Microseconds(), f.channel, ln.id, arg, seq).Int64Slice()
	if err != nil || len(res) < 7 {
		return nil
	}
	f.clock(time.UnixMicro(res[5]), start)
	return res
}

// An op is a change of this process's entry in a lane's queue, decided
// under the lane's lock and sent after it is released: ops decided later
// carry higher sequence numbers, so that the script refuses one that
// reaches Redis after a later one (over another pooled connection), and
// the lane applies a reply only if no later op of its own is on its way.
type op struct {
	kind  string // "j" (join or renew) or "p" (pass or leave)
	stamp int64  // the entry's score; < 0: leave
	hint  int64  // "p": when the new first may ask, µs on the Redis clock (fleet.now)
	seq   int64
}

// op numbers a change of ln's entry, of which the new first may ask after
// hint; ln.mu is held. The hint travels as a time on the Redis clock, so
// that the time the pass and its message take is not added to it.
func (f *fleet) op(ln *lane, kind string, stamp int64, hint time.Duration) op {
	o := op{kind: kind, stamp: stamp, hint: f.now() + hint.Microseconds(), seq: f.seq.Add(1)}
	ln.sent = o.seq
	return o
}

// send runs o and applies its reply; ln.mu is not held.
func (f *fleet) send(ln *lane, o op) {
	res := f.run(ln, o.kind, o.stamp, o.hint, o.seq)
	f.apply(ln, res, o.seq)
}

// apply notes the reply to this process's op seq.
func (f *fleet) apply(ln *lane, res []int64, seq int64) {
	ln.mu.Lock()
	defer ln.mu.Unlock()
	ln.renewed = time.Now()
	latest := seq == ln.sent // no later op of this lane is on its way
	if res == nil {
		if latest {
			// Redis failed: act as if alone, so that waiters are not
			// stuck (and do not retry the script at once).
			ln.joined, ln.onTurn, ln.othersMin = false, false, none
			ln.signalHead()
		}
		return
	}
	if res[3] > 0 && ln.heard(res[3]) {
		go f.shorten(ln)
	}
	ln.flows = len(res) > 7 && res[7] == 1
	if res[6] == 1 && ln.fresh(res[4]) {
		// Else a later op of this process was applied first (its reply
		// or a message after it tells more), or a message made after
		// this reply was.
		others := int64(none)
		if res[1] >= 0 {
			others = res[1]
		}
		f.setOthers(ln, others)
		if latest {
			ln.onTurn = ln.joined && res[0] == 1
		}
	}
	ln.signalHead()
}

// learn reads, for a lane this process has not used yet, whether an
// upstream block holds it and whether other processes wait in it: a first
// caller must then queue behind them instead of asking at once.
func (f *fleet) learn(ln *lane) {
	res := f.run(ln, "g", 0, 0, 0)
	if len(res) < 7 {
		return
	}
	ln.mu.Lock()
	defer ln.mu.Unlock()
	ln.flows = len(res) > 7 && res[7] == 1
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
	f.run(ln, "b", 0, ms, 0)
	f.listBlock(ln, ms)
}

// kick tells every process that ln's windows have room now (a call was
// given back), when others wait: the head of the one on turn asks at
// once instead of at the time it was told.
func (f *fleet) kick(ln *lane) {
	ln.kick()
	ln.mu.Lock()
	others := ln.othersMin != none
	ln.mu.Unlock()
	if others {
		f.run(ln, "k", 0, 0, 0)
	}
}

// setOthers notes the earliest arrival of another process's head in ln
// (lane.setOthers), telling the fleet of the room this process made
// quietly when that head may have missed it; ln.mu is held.
func (f *fleet) setOthers(ln *lane, v int64) {
	if wait, tell := ln.setOthers(v); tell {
		f.kickLater(ln, wait)
	}
}

// kickLater publishes "room now" in ln after wait, without telling this
// process's head (a Finish did): one script call, in a timer's goroutine,
// which ends within the call's timeout.
func (f *fleet) kickLater(ln *lane, wait time.Duration) {
	time.AfterFunc(wait, func() { f.run(ln, "k", 0, 0, 0) })
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
		if o, ok := f.message(ln, parts); ok {
			f.send(ln, o)
		}
	}
}

// message applies a message of the turn script. It returns an op to send
// when the queue holds an entry of this process that it had given up
// (its op's reply was lost): a leave, so that the others need not wait
// for its lease to end.
func (f *fleet) message(ln *lane, parts []string) (op, bool) {
	num := func(i int) int64 { return msgNum(parts, i) }
	ln.mu.Lock()
	defer ln.mu.Unlock()
	switch parts[0] {
	case "q":
		return f.queueMessage(ln, parts)
	case "k":
		ln.wakeAt, ln.kicked = time.Time{}, true
		ln.signalHead()
	case "h":
		// A call gave up, here or in another process:
		// h|lane|member|x|inc|now|field (the field may hold '|').
		if len(parts) < 7 || num(3) < 0 || num(4) <= 0 || num(5) <= 0 {
			return op{}, false
		}
		s := shift{field: strings.Join(parts[6:], "|"), x: num(3), inc: num(4), at: num(5), heard: time.Now()}
		if ln.shifted(s) && ln.joined {
			return f.op(ln, "j", ln.q[0].stamp, 0), true
		}
	case "a":
		// A call of the flow was admitted at once, its flow's turn spent:
		// a|lane|member|inc|now|field (the field may hold '|'). Every
		// process moves its calls of the flow later.
		if len(parts) < 6 || num(3) <= 0 || num(4) <= 0 {
			return op{}, false
		}
		s := shift{field: strings.Join(parts[5:], "|"), x: math.MinInt64, inc: -num(3), at: num(4), heard: time.Now()}
		if ln.shifted(s) && ln.joined {
			return f.op(ln, "j", ln.q[0].stamp, 0), true
		}
	case "c":
		// A class's new grid: c|lane|n|A|X0|epoch|class (the class may
		// hold '|').
		if len(parts) < 7 || num(2) < 1 || num(5) < 1 {
			return op{}, false
		}
		g := grid{n: num(2), a: num(3), x0: num(4), epoch: num(5)}
		o := ln.regrid(strings.Join(parts[6:], "|"), g)
		return o, o.kind != ""
	case "b":
		if ms := num(2); ms > 0 {
			ln.heard(ms)
			ln.signalHead()
		}
	}
	return op{}, false
}

// msgNum returns field i of a message as a number, -1 when it is missing
// or not a number.
func msgNum(parts []string, i int) int64 {
	if i >= len(parts) {
		return -1
	}
	n, err := strconv.ParseInt(parts[i], 10, 64)
	if err != nil {
		return -1
	}
	return n
}

// queueMessage applies a 'q' message, the queue after an op that changed
// its first member or first two scores (see message). ln.mu is held.
func (f *fleet) queueMessage(ln *lane, parts []string) (op, bool) {
	if len(parts) != 8 || !ln.fresh(msgNum(parts, 2)) {
		return op{}, false
	}
	first, score, second := parts[3], msgNum(parts, 5), msgNum(parts, 6)
	if first != f.member {
		// Another process has the turn, or nobody waits.
		ln.onTurn = false
		others := int64(none)
		if first != "" && score >= 0 {
			others = score
		}
		f.setOthers(ln, others)
		ln.signalHead()
		return op{}, false
	}
	others := int64(none)
	if second >= 0 {
		others = second
	}
	f.setOthers(ln, others)
	if msgNum(parts, 4) != ln.sent {
		// An op of this process made after this state is on its
		// way: its reply tells whether the turn is still here.
		ln.signalHead()
		return op{}, false
	}
	switch {
	case !ln.joined && len(ln.q) == 0:
		return f.op(ln, "p", -1, 0), true
	case !ln.joined:
		// The entry made by an op whose reply was lost: keep it.
		ln.joined = true
	}
	if !ln.onTurn {
		ln.onTurn = true
		if at := msgNum(parts, 7); at >= 0 && !ln.kicked {
			// Passed on by a process whose admission or refusal said
			// when the windows have room. A room-now message heard
			// since this head last asked may postdate that: it
			// asks at once then.
			wait := time.Duration(max(at-f.now(), 0)) * time.Microsecond
			ln.wakeAt = time.Now().Add(wait)
			ln.paceAt = ln.wakeAt // a paced lane's next slot comes with the turn
		}
	}
	ln.signalHead()
	return op{}, false
}
