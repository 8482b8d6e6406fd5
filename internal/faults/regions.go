package faults

import (
	"fmt"
	"math/rand/v2"
	"time"
)

// RegionShare is region r's share of a headroom among R regions,
// ⌊(max(h, 0) + r) / R⌋; the R shares of h sum to max(h, 0) (Hermite's
// identity). See docs/regions.md, The rule.
func RegionShare(r, regions int, headroom int64) int64 {
	if headroom < 0 {
		headroom = 0
	}
	return (headroom + int64(r)) / int64(regions)
}

// RegionsBound is the theorem of docs/regions.md: the most a window of
// limit holds across regions, given its stable admissions and, for each
// region holding unstable ones, the stable peer admissions it had not
// received at its last admission.
func RegionsBound(regions int, limit, stable int64, unseen []int64) int64 {
	b := max(limit, stable)
	for _, n := range unseen {
		b += (n + int64(regions) - 1) / int64(regions)
	}
	return b
}

// RegionCut cuts Region off from every other region during [From, To).
type RegionCut struct {
	Region   int
	From, To time.Duration
}

// RegionsSim is a model of regions under the rule of docs/regions.md, on a
// millisecond clock: each region decides alone on what it has received;
// its admissions reach each peer in batches after a lag, the peer's
// acknowledgement comes back after another, and a cut holds both until it
// heals. A region whose Redis is down (RegionKill, RegionRestartEmpty)
// admits nothing and neither sends nor receives; one restarted empty
// forgets its own admissions and what it received: what it admitted still
// reaches its peers (the replication queues are in the processes), but no
// peer sends again what it had received. It checks the theorem's bound at every
// millisecond, but in windows holding an admission a region forgot.
type RegionsSim struct {
	Limit            int64
	Window, Duration time.Duration
	// Batch is the replicator's interval: an admission leaves at the next
	// multiple of it.
	Batch          time.Duration
	MinLag, MaxLag time.Duration // one way, drawn per message
	// Rates are each region's requests per second; len(Rates) is the
	// number of regions.
	Rates []float64
	Cuts  []RegionCut
	// Faults are partitions, lag spikes and a region's Redis killed or
	// restarted empty, as a RegionsPlan holds them.
	Faults []RegionFault
	// Naive drops check (b): each region checks only its own view, as
	// regions counting alone with replication would.
	Naive bool
	Seed  uint64
}

// RegionsResult is what a simulation saw.
type RegionsResult struct {
	Admitted    int   // admissions in the whole run
	Requests    int   // requests in the whole run
	MaxInWindow int64 // the most admissions any window held
	// MaxOver is the most a window held beyond its bound (<= 0 when the
	// bound held everywhere); Violation describes the first excess.
	MaxOver   int64
	Violation string
	// Admissions are every admission, in order.
	Admissions []RegionAdmission
}

// simAdmission is one admission: where and when it was made, when each
// region received it, and when its region knew every peer had.
type simAdmission struct {
	region   int
	at       int64
	recvAt   []int64 // per region; -1 until received or once forgotten; its own region's is at
	acked    []bool  // per peer region
	acks     int
	stableAt int64 // -1 until stable
	// forgotten: a region that had it restarted empty since.
	forgotten bool
}

type simEvent struct {
	ack bool // an acknowledgement from to reaching a.region, else a reaching to
	a   *simAdmission
	to  int
}

// sim is one run of a RegionsSim.
type sim struct {
	RegionsSim
	rng                *rand.Rand
	end, window, batch int64
	events             [][]simEvent
	all                []*simAdmission // in the window, in order of at
	last               []int64         // each region's last admission
	forgetAt           map[int64][]int // regions restarted empty at a millisecond
	block              [][]blockSpan   // per region, when it is cut off or down
	res                RegionsResult
}

func msOf(d time.Duration) int64 { return d.Milliseconds() }

// Run runs the simulation.
func (s RegionsSim) Run() (RegionsResult, error) {
	regions := len(s.Rates)
	if regions < 2 || s.Limit < 1 || s.Window < time.Millisecond || s.Batch < time.Millisecond ||
		s.MinLag < 0 || s.MaxLag < s.MinLag {
		return RegionsResult{}, fmt.Errorf("faults: regions simulation: bad parameters %+v", s)
	}
	m := &sim{RegionsSim: s, rng: rand.New(rand.NewPCG(s.Seed, s.Seed^0x9e3779b97f4a7c15)),
		end: msOf(s.Duration), window: msOf(s.Window), batch: msOf(s.Batch),
		last: make([]int64, regions), forgetAt: map[int64][]int{}, block: s.blocks()}
	m.events = make([][]simEvent, m.end+1)
	for i := range m.last {
		m.last[i] = -1
	}
	for _, f := range s.Faults {
		if f.Kind == RegionRestartEmpty {
			m.forgetAt[msOf(f.end())] = append(m.forgetAt[msOf(f.end())], f.Region)
		}
	}
	for t := int64(0); t <= m.end; t++ {
		for _, r := range m.forgetAt[t] {
			m.forget(r, t)
		}
		m.deliver(t)
		from := 0
		for from < len(m.all) && m.all[from].at <= t-m.window {
			from++
		}
		m.all = m.all[from:]
		for r := range regions {
			if m.rng.Float64() < s.Rates[r]/1000 {
				m.request(r, t)
			}
		}
		m.check(t)
	}
	return m.res, nil
}

// blockSpan is a time a region can neither send nor receive: [from, to) ms.
type blockSpan struct{ from, to int64 }

// blocks returns, per region, the spans it is cut off or its Redis down.
func (s RegionsSim) blocks() [][]blockSpan {
	out := make([][]blockSpan, len(s.Rates))
	for _, c := range s.Cuts {
		out[c.Region] = append(out[c.Region], blockSpan{msOf(c.From), msOf(c.To)})
	}
	for _, f := range s.Faults {
		if f.Kind != RegionLagSpike && f.Kind != RegionReset {
			out[f.Region] = append(out[f.Region], blockSpan{msOf(f.At), msOf(f.end())})
		}
	}
	return out
}

// down reports whether region r's Redis is down at t.
func (m *sim) down(r int, t int64) bool {
	for _, f := range m.Faults {
		if (f.Kind == RegionKill || f.Kind == RegionRestartEmpty) && f.Region == r && msOf(f.At) <= t && t < msOf(f.end()) {
			return true
		}
	}
	return false
}

// lag draws one message's one-way lag at t, a spike's when one is on.
func (m *sim) lag(t int64) int64 {
	lo, hi := msOf(m.MinLag), msOf(m.MaxLag)
	for _, f := range m.Faults {
		if f.Kind == RegionLagSpike && msOf(f.At) <= t && t < msOf(f.end()) {
			hi = max(hi, msOf(f.Lag))
		}
	}
	if hi > lo {
		return lo + m.rng.Int64N(hi-lo+1)
	}
	return lo
}

// arrival is when a message sent from a to b at t arrives, leaving at the
// next batch when batched: a cut of either end while it travels sends it
// again when the cut heals.
func (m *sim) arrival(a, b int, t int64, batched bool) int64 {
	for {
		if batched && t%m.batch != 0 {
			t += m.batch - t%m.batch
		}
		lag := m.lag(t)
		// The first moment of the trip when either end is blocked, and
		// when every block in force then ends.
		first := int64(-1)
		for _, r := range []int{a, b} {
			for _, sp := range m.block[r] {
				if sp.from <= t+lag && sp.to > t && (first < 0 || max(sp.from, t) < first) {
					first = max(sp.from, t)
				}
			}
		}
		if first < 0 {
			return t + lag
		}
		for _, r := range []int{a, b} {
			for _, sp := range m.block[r] {
				if sp.from <= first && first < sp.to {
					t = max(t, sp.to)
				}
			}
		}
	}
}

// schedule queues e at at, and never at the current millisecond, whose
// events are being handled.
func (m *sim) schedule(at, now int64, e simEvent) {
	at = max(at, now+1)
	if at <= m.end {
		m.events[at] = append(m.events[at], e)
	}
}

// deliver handles the messages arriving at t.
func (m *sim) deliver(t int64) {
	for _, e := range m.events[t] {
		if e.ack {
			if !e.a.acked[e.to] {
				e.a.acked[e.to] = true
				e.a.acks++
				if e.a.acks == len(m.Rates)-1 {
					e.a.stableAt = t
				}
			}
			continue
		}
		if e.a.recvAt[e.to] < 0 {
			e.a.recvAt[e.to] = t
		}
		m.schedule(m.arrival(e.to, e.a.region, t, false), t, simEvent{ack: true, a: e.a, to: e.to})
	}
	m.events[t] = nil
}

// forget restarts region r's Redis empty at t: it forgets its own
// admissions, which its process still sends to its peers, and what it
// had received, which no peer sends again (the replication queues are in
// the processes, and hold only what was not yet acknowledged).
func (m *sim) forget(r int, t int64) {
	for _, a := range m.all {
		if a.recvAt[r] >= 0 {
			a.recvAt[r] = -1
			a.forgotten = true
		}
	}
}

// request decides a request of region r at t by checks (a) and (b).
func (m *sim) request(r int, t int64) {
	m.res.Requests++
	if m.down(r, t) {
		return
	}
	regions := len(m.Rates)
	var v, u int64
	for _, a := range m.all {
		if a.recvAt[r] < 0 {
			continue // not received, or forgotten
		}
		v++
		if a.region == r && a.stableAt < 0 {
			u++
		}
	}
	if v+1 > m.Limit || !m.Naive && u+1 > RegionShare(r, regions, m.Limit-(v-u)) {
		return
	}
	a := &simAdmission{region: r, at: t, recvAt: make([]int64, regions), acked: make([]bool, regions), stableAt: -1}
	for p := range a.recvAt {
		a.recvAt[p] = -1
		if p != r {
			m.schedule(m.arrival(r, p, t, true), t, simEvent{a: a, to: p})
		}
	}
	a.recvAt[r] = t
	m.all = append(m.all, a)
	m.last[r] = t
	m.res.Admitted++
	m.res.Admissions = append(m.res.Admissions, RegionAdmission{Region: r, At: time.Duration(t) * time.Millisecond})
}

// check compares the window ending at t with the theorem's bound.
func (m *sim) check(t int64) {
	regions := len(m.Rates)
	var total, stable int64
	unstable := make([]int64, regions)
	theorem := true
	for _, a := range m.all {
		total++
		theorem = theorem && !a.forgotten
		if a.stableAt >= 0 {
			stable++
		} else {
			unstable[a.region]++
		}
	}
	m.res.MaxInWindow = max(m.res.MaxInWindow, total)
	if !theorem {
		return
	}
	var unseen []int64
	for r := range regions {
		if unstable[r] == 0 {
			continue
		}
		var n int64
		for _, a := range m.all {
			if a.region != r && a.stableAt >= 0 && a.recvAt[r] > m.last[r] {
				n++
			}
		}
		unseen = append(unseen, n)
	}
	bound := RegionsBound(regions, m.Limit, stable, unseen)
	over := total - bound
	m.res.MaxOver = max(m.res.MaxOver, over)
	if over > 0 && m.res.Violation == "" {
		m.res.Violation = fmt.Sprintf("at %dms the window held %d, bound %d (stable %d, unseen %v)", t, total, bound, stable, unseen)
	}
}
