package faults

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"time"
)

// The throttle's part of the harness: a generated throttle (global and
// key(k) rules, short sliding windows with small limits, a named cost,
// N concurrent), processes each with its own Limiter and Throttle on one
// backend, callers that wait, give up, finish with a settlement or never,
// an upstream that answers some calls 429 with retry-after-ms, and faults:
// Redis killed and restarted (with its data or empty), DEBUG SLEEP, and a
// process that dies holding permits. A throttle's history runs in real
// time (the throttle waits on real timers), so its periods are short.

// ThrottleRule is one rule of a generated throttle.
type ThrottleRule struct {
	Key     bool     `json:",omitempty"` // key(k); else global
	Cost    string   `json:",omitempty"` // a named cost ([tokens]); "" counts calls
	Windows []Window // sliding windows, and at most one Concurrent
}

func (l ThrottleRule) String() string {
	var b strings.Builder
	if l.Key {
		b.WriteString("key(k)")
	} else {
		b.WriteString("global")
	}
	if l.Cost != "" {
		b.WriteString("[" + l.Cost + "]")
	}
	b.WriteString(":")
	for i, w := range l.Windows {
		if i > 0 {
			b.WriteString(",")
		}
		if w.Concurrent {
			fmt.Fprintf(&b, "%d concurrent", w.Limit)
		} else {
			fmt.Fprintf(&b, "%d/%dms", w.Limit, w.Period.Milliseconds())
		}
	}
	return b.String()
}

// ThrottleCall is one call of a history: a caller of process Proc waits
// for key value Key (when the throttle has key(k) rules) at an
// estimated cost, calls the upstream once admitted, and finishes.
type ThrottleCall struct {
	Proc int
	Key  int   `json:",omitempty"`
	Cost int64 `json:",omitempty"` // the estimate of [tokens], when a rule has it
	// Cancel ends the caller's context this long after it arrived; 0:
	// the caller waits as long as the history's patience.
	Cancel time.Duration `json:",omitempty"`
	// Hold is how long the call runs at the upstream before it ends.
	Hold time.Duration `json:",omitempty"`
	// Actual is what the call cost, settled by Finish; -1 keeps the
	// estimate.
	Actual int64
	// Drop never finishes the Permit (or never closes the response
	// body): its caller forgot it.
	Drop bool `json:",omitempty"`
	// Transport makes the call through Throttle.Transport; else Wait,
	// then the upstream, then Permit.Finish.
	Transport bool `json:",omitempty"`
	// RetryAfter, through Transport, makes the upstream answer 429 with
	// retry-after-ms: a learned block of the call's lane.
	RetryAfter time.Duration `json:",omitempty"`
	// Class and Tenant are the call's Call.Class and Call.Tenant.
	Class  string `json:",omitempty"`
	Tenant string `json:",omitempty"`
}

func (c ThrottleCall) String() string {
	s := fmt.Sprintf("p%d:k%d", c.Proc, c.Key)
	if c.Cost > 0 {
		s += fmt.Sprintf("$%d", c.Cost)
	}
	if c.Actual >= 0 {
		s += fmt.Sprintf("→%d", c.Actual)
	}
	if c.Cancel > 0 {
		s += fmt.Sprintf(" cancel@%v", c.Cancel)
	}
	if c.Hold > 0 {
		s += fmt.Sprintf(" hold %v", c.Hold)
	}
	if c.Drop {
		s += " dropped"
	}
	if c.Transport {
		s += " transport"
	}
	if c.RetryAfter > 0 {
		s += fmt.Sprintf(" 429 retry-after %v", c.RetryAfter)
	}
	if c.Class != "" || c.Tenant != "" {
		s += fmt.Sprintf(" %s/%s", c.Class, c.Tenant)
	}
	return s
}

// ThrottleKind is what a step of a throttle's history does.
type ThrottleKind uint8

// Kinds of a throttle's steps.
const (
	TCalls  ThrottleKind = iota // Calls arrive at once
	TPause                      // D of real time passes
	TOutage                     // Redis (master Node) dies (SIGKILL) and restarts D later, Empty or with its data
	TSleep                      // DEBUG SLEEP D
	TDie                        // process Proc dies holding its permits (its Limiter closed, nothing finished); a new one starts
	numThrottleKinds
)

var throttleKindNames = [numThrottleKinds]string{"calls", "pause", "outage", "sleep", "die"}

func (k ThrottleKind) String() string {
	if k < numThrottleKinds {
		return throttleKindNames[k]
	}
	return fmt.Sprintf("kind(%d)", k)
}

// ThrottleStep is one step of a throttle's history.
type ThrottleStep struct {
	Kind  ThrottleKind   `json:",omitempty"`
	Calls []ThrottleCall `json:",omitempty"`
	D     time.Duration  `json:",omitempty"`
	Node  int            `json:",omitempty"`
	Empty bool           `json:",omitempty"`
	Proc  int            `json:",omitempty"`
}

func (s ThrottleStep) String() string {
	switch s.Kind {
	case TCalls:
		var parts []string
		for _, c := range s.Calls {
			parts = append(parts, c.String())
		}
		return "calls " + strings.Join(parts, ", ")
	case TPause, TSleep:
		return fmt.Sprintf("%v %v", s.Kind, s.D)
	case TOutage:
		e := "with its data"
		if s.Empty {
			e = "empty"
		}
		return fmt.Sprintf("outage of node %d for %v, restarted %s", s.Node, s.D, e)
	case TDie:
		return fmt.Sprintf("process %d dies", s.Proc)
	}
	return s.Kind.String()
}

// ThrottleScenario is a generated throttle history.
type ThrottleScenario struct {
	Seed  uint64
	Rules []ThrottleRule
	// Shares are the throttle's share(CLASS):P% statements; with them,
	// or with calls of a Tenant, the calls are served by classes and
	// tenants instead of in arrival order.
	Shares []ThrottleShare `json:",omitempty"`
	Procs  int
	Keys   int // key values, when a rule is key(k); 1 otherwise
	Steps  []ThrottleStep
}

// ThrottleShare is a share(CLASS):P% statement.
type ThrottleShare struct {
	Class   string
	Percent int
}

// Text returns the throttle's rules text.
func (p ThrottleScenario) Text() string {
	var parts []string
	for _, l := range p.Rules {
		parts = append(parts, l.String())
	}
	for _, s := range p.Shares {
		parts = append(parts, fmt.Sprintf("share(%s):%d%%", s.Class, s.Percent))
	}
	return strings.Join(parts, "; ")
}

// Fair reports whether the scenario's calls are served by classes and
// tenants: it has shares, or a call has a tenant.
func (p ThrottleScenario) Fair() bool {
	if len(p.Shares) > 0 {
		return true
	}
	for _, s := range p.Steps {
		for _, c := range s.Calls {
			if c.Tenant != "" {
				return true
			}
		}
	}
	return false
}

// HasKey reports whether a rule is key(k): calls of different key
// values then wait in different lanes.
func (p ThrottleScenario) HasKey() bool {
	for _, l := range p.Rules {
		if l.Key {
			return true
		}
	}
	return false
}

// CostName returns the throttle's named cost, "" for none.
func (p ThrottleScenario) CostName() string {
	for _, l := range p.Rules {
		if l.Cost != "" {
			return l.Cost
		}
	}
	return ""
}

func (p ThrottleScenario) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "seed %d: %q, %d processes, %d keys, %d steps\n", p.Seed, p.Text(), p.Procs, p.Keys, len(p.Steps))
	for i, s := range p.Steps {
		fmt.Fprintf(&b, "  %3d %v\n", i, s)
	}
	return b.String()
}

// throttlePeriods are the periods of a throttle's sliding windows: short,
// since its history runs in real time, and long enough for a loaded
// machine's Redis calls.
var throttlePeriods = []time.Duration{400 * time.Millisecond, 600 * time.Millisecond, time.Second, 1500 * time.Millisecond}

// GenerateThrottle returns the throttle scenario of seed for a backend with
// caps: the same seed and caps always give the same scenario. The
// scenario of an even seed has classes and tenants (fair).
func GenerateThrottle(seed uint64, caps Caps) ThrottleScenario {
	p := generateThrottle(seed, caps)
	if seed%2 == 0 {
		fair(&p)
	}
	return p
}

// The classes and tenants of a fair scenario: class a has a share, class b
// and the calls of no class share what it leaves.
var (
	fairClasses = []string{"a", "a", "b", ""}
	fairTenants = []string{"t0", "t0", "t0", "t1", "t2"} // t0 has three times the calls of the others
)

// fair gives p's calls classes and tenants and a share to class a, and
// adds a burst of calls of every class, most of tenant t0, onto the
// windows: the shares and the tenants' turns matter while it drains. Its
// own random stream leaves the rest of p as the seed made it.
func fair(p *ThrottleScenario) {
	r := rand.New(rand.NewPCG(p.Seed, 0xfa12))
	p.Shares = []ThrottleShare{{Class: "a", Percent: 30 + 10*r.IntN(4)}}
	key := r.IntN(p.Keys)
	for i := range p.Steps {
		for j := range p.Steps[i].Calls {
			c := &p.Steps[i].Calls[j]
			c.Class, c.Tenant = fairClasses[r.IntN(len(fairClasses))], fairTenants[r.IntN(len(fairTenants))]
		}
	}
	var burst ThrottleStep
	burst.Kind = TCalls
	for i := range 12 + r.IntN(5) {
		c := ThrottleCall{Proc: r.IntN(p.Procs), Key: key, Actual: -1, Hold: time.Duration(r.IntN(100)) * time.Millisecond,
			Class: fairClasses[i%len(fairClasses)], Tenant: fairTenants[r.IntN(len(fairTenants))]}
		for _, l := range p.Rules {
			if l.Cost != "" {
				c.Cost = 1 + r.Int64N(l.Windows[0].Limit/2)
			}
		}
		burst.Calls = append(burst.Calls, c)
	}
	at := 1 + r.IntN(len(p.Steps)-1)
	p.Steps = slices.Insert(p.Steps, at, burst, ThrottleStep{Kind: TPause, D: 2 * time.Second})
}

func generateThrottle(seed uint64, caps Caps) ThrottleScenario {
	r := rand.New(rand.NewPCG(seed, 0x7407))
	p := ThrottleScenario{Seed: seed, Procs: 2 + r.IntN(2), Keys: 1}
	window := func(limit int64) Window {
		return Window{Limit: limit, Period: throttlePeriods[r.IntN(len(throttlePeriods))]}
	}
	global := r.IntN(5) < 2
	key := !global || r.IntN(2) == 0
	if global {
		p.Rules = append(p.Rules, ThrottleRule{Windows: []Window{window(2 + r.Int64N(5))}})
	}
	if key {
		p.Keys = 1 + r.IntN(3)
		l := ThrottleRule{Key: true, Windows: []Window{window(1 + r.Int64N(3))}}
		if w := window(l.Windows[0].Limit + 1 + r.Int64N(3)); r.IntN(3) == 0 && w.Period > l.Windows[0].Period {
			l.Windows = append(l.Windows, w)
		}
		p.Rules = append(p.Rules, l)
	}
	var tokens int64
	if r.IntN(10) < 3 {
		tokens = 8 + r.Int64N(23)
		p.Rules = append(p.Rules, ThrottleRule{Key: key, Cost: "tokens", Windows: []Window{window(tokens)}})
	}
	if r.IntN(10) < 3 {
		// On the first rule counting calls: the key's when there is one.
		i := 0
		if key && global {
			i = 1
		}
		p.Rules[i].Windows = append(p.Rules[i].Windows, Window{Limit: 1 + r.Int64N(2), Concurrent: true})
	}
	faults := 0
	switch x := r.IntN(10); {
	case x < 3:
		faults = 1
	case x < 4:
		faults = 2
	}
	steps := 10 + r.IntN(14)
	faultAt := map[int]bool{}
	for range faults {
		faultAt[2+r.IntN(steps-2)] = true
	}
	for i := range steps {
		var s ThrottleStep
		switch x := r.IntN(100); {
		case faultAt[i]:
			switch y := r.IntN(3); {
			case y == 0:
				s = ThrottleStep{Kind: TDie, Proc: r.IntN(p.Procs)}
			case y == 1 && caps.Sleep:
				s = ThrottleStep{Kind: TSleep, D: time.Duration(600+r.IntN(500)) * time.Millisecond}
			default:
				s = ThrottleStep{Kind: TOutage, Node: r.IntN(max(caps.Nodes, 1)), D: time.Duration(100+r.IntN(500)) * time.Millisecond,
					Empty: !caps.Persist || r.IntN(2) == 0}
			}
		case x < 50:
			s.Kind = TCalls
			n := 1 + r.IntN(4)
			if r.IntN(6) == 0 {
				n = 6 + r.IntN(8) // a burst onto a full window
			}
			for range n {
				c := ThrottleCall{Proc: r.IntN(p.Procs), Key: r.IntN(p.Keys), Actual: -1,
					Hold: time.Duration(r.IntN(250)) * time.Millisecond}
				if tokens > 0 {
					c.Cost = 1 + r.Int64N(tokens/2)
					if r.IntN(10) < 6 {
						c.Actual = r.Int64N(c.Cost*3/2 + 1)
					}
				}
				if r.IntN(4) == 0 {
					c.Cancel = time.Duration(50+r.IntN(900)) * time.Millisecond
				}
				c.Drop = r.IntN(14) == 0
				c.Transport = r.IntN(5) < 2
				if c.Transport && r.IntN(12) == 0 {
					c.RetryAfter = time.Duration(200+r.IntN(600)) * time.Millisecond
				}
				s.Calls = append(s.Calls, c)
			}
		default:
			s = ThrottleStep{Kind: TPause, D: time.Duration(50+r.IntN(450)) * time.Millisecond}
		}
		p.Steps = append(p.Steps, s)
	}
	return p
}
