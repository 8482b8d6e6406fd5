package faults

import (
	"cmp"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"time"
)

// Kind is what a step of a scenario does.
type Kind uint8

// Kinds of steps.
const (
	Requests      Kind = iota // Reqs at once, at the current time
	Advance                   // the clock moves forward by D
	GiveBack                  // the Pick-th live admission is given back
	Kill                      // Redis (or the Node-th master) dies: SIGKILL
	Restart                   // a dead Redis starts again, keeping what it persisted
	RestartEmpty              // a dead Redis starts again, empty
	Sleep                     // Redis stops answering for D (DEBUG SLEEP)
	Evict                     // Redis evicts keys under maxmemory
	RestartEngine             // engine Engine dies (Close, nothing finished) and a new one starts
	Settle                    // the Pick-th live admission is settled to Actual
	Release                   // the Pick-th live admission ends: its slots are released
	Override                  // a rule override pushed at run time: the group's limits become Limits
	numKinds
)

var kindNames = [numKinds]string{"requests", "advance", "give back", "kill", "restart", "restart empty", "sleep", "evict", "restart engine", "settle", "release", "override"}

func (k Kind) String() string {
	if k < numKinds {
		return kindNames[k]
	}
	return fmt.Sprintf("kind(%d)", k)
}

// Req is one request of a step: engine Engine asks for subject Subject,
// at a cost (a group with costs) or with a distinct: value, by a caller
// of Role, with Limit the value of the group's limit function.
type Req struct {
	Engine, Subject int
	Cost            int64 `json:",omitempty"`
	Value           int   `json:",omitempty"`
	// Role is the caller's role in a scenario with roles (Scenario.RoleLimits):
	// "" for none, or RoleExempt, RoleByIP or RoleWithRules. A caller of
	// RoleByIP or RoleWithRules comes from IP number Subject.
	Role string `json:",omitempty"`
	// Limit is what the limit function of the window Scenario.LimitFunc
	// returned for the request.
	Limit int64 `json:",omitempty"`
}

// The roles of a scenario with roles, as a group declares them:
//
//	user:...; exempt:superadmin; role(partner)=ip:...
//
// with role.Policy{ByIP: admin}.
const (
	// RoleExempt skips every rule: the request reaches no engine.
	RoleExempt = "superadmin"
	// RoleByIP is a shared account: the group's user rule counts the
	// client IP instead of the user.
	RoleByIP = "admin"
	// RoleWithRules has rules of its own: an ip rule with the
	// group's windows and the limits Scenario.RoleLimits.
	RoleWithRules = "partner"
)

// Step is one step of a scenario.
type Step struct {
	Kind   Kind          `json:",omitempty"`
	Reqs   []Req         `json:",omitempty"` // Requests
	D      time.Duration `json:",omitempty"` // Advance, Sleep
	Pick   int           `json:",omitempty"` // GiveBack: which live admission, modulo their number
	Engine int           `json:",omitempty"` // RestartEngine
	Node   int           `json:",omitempty"` // Kill, Restart, RestartEmpty, Evict: which master of a cluster
	Actual int64         `json:",omitempty"` // Settle
	// Limits are an Override's limits, by window of the scenario; 0 keeps the
	// window's limit function (Scenario.LimitFunc).
	Limits []int64 `json:",omitempty"`
}

func (s Step) String() string {
	switch s.Kind {
	case Requests:
		var b strings.Builder
		for i, r := range s.Reqs {
			if i > 0 {
				b.WriteString(" ")
			}
			fmt.Fprintf(&b, "e%d:s%d", r.Engine, r.Subject)
			if r.Cost > 0 {
				fmt.Fprintf(&b, "$%d", r.Cost)
			}
			if r.Value > 0 {
				fmt.Fprintf(&b, "=v%d", r.Value)
			}
			if r.Role != "" {
				fmt.Fprintf(&b, "@%s", r.Role)
			}
			if r.Limit > 0 {
				fmt.Fprintf(&b, "/L%d", r.Limit)
			}
		}
		return "requests " + b.String()
	case Override:
		return fmt.Sprintf("override limits %v", s.Limits)
	case Advance, Sleep:
		return fmt.Sprintf("%v %v", s.Kind, s.D)
	case GiveBack:
		return fmt.Sprintf("give back #%d", s.Pick)
	case Settle:
		return fmt.Sprintf("settle #%d to %d", s.Pick, s.Actual)
	case Release:
		return fmt.Sprintf("release #%d", s.Pick)
	case RestartEngine:
		return fmt.Sprintf("restart engine e%d", s.Engine)
	case Kill, Restart, RestartEmpty, Evict:
		return fmt.Sprintf("%v node %d", s.Kind, s.Node)
	}
	return s.Kind.String()
}

// Caps says which faults a backend can inject.
type Caps struct {
	Sleep   bool // DEBUG SLEEP
	Evict   bool // maxmemory with an evicting policy
	Persist bool // a restart can keep the data (AOF, or miniredis's Restart)
	Nodes   int  // masters: 1 for a single server
}

// Scenario is a generated history to run: a rule group, engines standing in for
// processes, subjects, and the steps.
type Scenario struct {
	Seed    uint64
	Windows []Window
	Fail    string
	// Mode is the group's kind: "" counts requests, "cost" units (a
	// rule with a cost, settled), "distinct" distinct values,
	// "concurrent" requests with an in-flight window too.
	Mode string `json:",omitempty"`
	// Zone is the IANA zone of the group's calendar windows ("" for UTC),
	// and Start how long after the harness's origin the clock starts: a
	// scenario with a calendar window starts shortly before a local midnight,
	// so that its steps cross into a new day.
	Zone  string        `json:",omitempty"`
	Start time.Duration `json:",omitempty"`
	// Block is the group's block:DURATION, 0 for none.
	Block time.Duration `json:",omitempty"`
	// RoleLimits, when set, gives the group roles (see RoleExempt): the
	// limits of the role(partner)= rules, by window.
	RoleLimits []int64 `json:",omitempty"`
	// LimitFunc, when not 0, makes the limit of window LimitFunc-1 a limit
	// function's ($quota): each request's is its Req.Limit.
	LimitFunc int `json:",omitempty"`
	Engines   int
	Subjects  int
	Steps     []Step
}

func (p Scenario) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "seed %d: windows %v, fail:%s, mode %q, %d engines, %d subjects, %d steps",
		p.Seed, p.Windows, p.Fail, p.Mode, p.Engines, p.Subjects, len(p.Steps))
	if p.Zone != "" || p.Start != 0 {
		fmt.Fprintf(&b, ", calendar:%s, clock starts at +%v", cmp.Or(p.Zone, "UTC"), p.Start)
	}
	if p.Block > 0 {
		fmt.Fprintf(&b, ", block:%v", p.Block)
	}
	if p.RoleLimits != nil {
		fmt.Fprintf(&b, ", exempt:%s, %s by IP, role(%s)=ip:%v", RoleExempt, RoleByIP, RoleWithRules, p.RoleLimits)
	}
	if p.LimitFunc > 0 {
		fmt.Fprintf(&b, ", window %d's limit $quota", p.LimitFunc-1)
	}
	b.WriteString("\n")
	for i, s := range p.Steps {
		fmt.Fprintf(&b, "  %3d %v\n", i, s)
	}
	return b.String()
}

// periods are the generator's window periods: short enough for a clock
// step to cross them, several apart so that groups mix them.
var periods = []time.Duration{time.Second, 2 * time.Second, 5 * time.Second, 10 * time.Second, 30 * time.Second, time.Minute}

// Origin is the time a scenario's clock counts from (Scenario.Start), as the
// engine's tests' clock does.
var Origin = time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)

// zones are the generator's calendar zones: UTC, whole and odd offsets on
// both sides of it.
var zones = []string{"", "Asia/Kolkata", "America/New_York", "Pacific/Chatham"}

// Generate returns the scenario of seed for a backend with caps: the same seed
// and caps always give the same scenario.
func Generate(seed uint64, caps Caps) Scenario {
	r := rand.New(rand.NewPCG(seed, 0x5eed))
	p := Scenario{Seed: seed, Engines: 2 + r.IntN(2), Subjects: 1 + r.IntN(3)}
	limit, scale := genWindows(r, &p)
	sliding := len(p.Windows)
	// Calendars and blocks draw from streams of their own: the scenarios
	// without one stay the scenarios those seeds gave before they were
	// generated.
	rc := rand.New(rand.NewPCG(seed, 0xca1))
	calendar := genCalendar(rc, &p, limit, scale)
	genBlock(rand.New(rand.NewPCG(seed, 0xb10c)), &p, calendar)
	if p.Mode == "concurrent" {
		p.Windows = append(p.Windows, Window{Limit: 1 + r.Int64N(3), Concurrent: true})
	}
	switch x := r.IntN(10); {
	case x < 6:
		p.Fail = "local"
	case x < 8:
		p.Fail = "closed"
	default:
		p.Fail = "open"
	}
	p.Steps = genSteps(r, p, caps, sliding)
	if calendar {
		p.Start = calendarStart(rc, p)
	}
	vary(&p, seed)
	return p
}

// genWindows draws p's mode and one to three sliding windows of distinct
// periods, longer ones with limits at least as large (a longer window with
// a smaller limit makes the shorter one moot, which is legal but tests
// less). It returns the longest window's limit and the unit of limits (10
// for costs).
func genWindows(r *rand.Rand, p *Scenario) (limit, scale int64) {
	switch x := r.IntN(10); {
	case x < 2:
		p.Mode = "cost"
	case x < 4:
		p.Mode = "distinct"
	case x < 6:
		p.Mode = "concurrent"
	}
	scale = 1
	if p.Mode == "cost" {
		scale = 10
	}
	n := 1 + r.IntN(3)
	perm := r.Perm(len(periods))[:n]
	slices.Sort(perm)
	for _, i := range perm {
		limit += (1 + r.Int64N(4)) * scale
		p.Windows = append(p.Windows, Window{Limit: limit, Period: periods[i]})
	}
	return limit, scale
}

// genCalendar adds a calendar day to a third of the groups that may have
// one (not with distinct:, docs/rules.md): its limit from below the
// shortest window's (a cost's at least its: a cost may be as large) to
// above the longest's, so that either may bind. It reports whether it
// added one.
func genCalendar(rc *rand.Rand, p *Scenario, limit, scale int64) bool {
	if p.Mode == "distinct" || rc.IntN(3) != 0 {
		return false
	}
	low := int64(1)
	if p.Mode == "cost" {
		low = p.Windows[0].Limit
	}
	p.Windows = append(p.Windows, Window{Limit: low + rc.Int64N(limit+2*scale-low+1), Calendar: "day"})
	p.Zone = zones[rc.IntN(len(zones))]
	return true
}

// genBlock adds a block to a third of the groups without an in-flight
// window (its denials start none) or a calendar one. A block key expires
// by Redis's own clock (PX) while the script reads the test clock: a block
// must outlast a history's real run, or Redis would forget it early.
func genBlock(rb *rand.Rand, p *Scenario, calendar bool) {
	if p.Mode != "concurrent" && !calendar && rb.IntN(3) == 0 {
		p.Block = []time.Duration{20 * time.Second, 45 * time.Second, 90 * time.Second}[rb.IntN(3)]
	}
}

// genSteps draws 30 to 79 steps for p: requests, clock advances (mostly
// within the shortest window, sometimes past the longest of its sliding
// windows), settlements, releases, give-backs, restarts and node faults
// within caps.
func genSteps(r *rand.Rand, p Scenario, caps Caps, sliding int) []Step {
	shortest := p.Windows[0].Period
	steps := make([]Step, 0, 80)
	down := make([]bool, max(caps.Nodes, 1))
	for range 30 + r.IntN(50) {
		var s Step
		switch x := r.IntN(100); {
		case x < 50:
			s.Kind = Requests
			s.Reqs = genReqs(r, p)
		case x < 72:
			s.Kind = Advance
			if r.IntN(8) == 0 {
				s.D = p.Windows[sliding-1].Period
			} else {
				s.D = time.Duration(r.Int64N(int64(shortest/time.Millisecond))+1) * time.Millisecond
			}
		case x < 80 && p.Mode == "cost" && r.IntN(2) == 0:
			s.Kind = Settle
			s.Pick = r.IntN(1000)
			s.Actual = r.Int64N(2 * p.Windows[0].Limit)
		case x < 80 && p.Mode == "concurrent" && r.IntN(3) > 0:
			s.Kind = Release
			s.Pick = r.IntN(1000)
		case x < 80:
			s.Kind = GiveBack
			s.Pick = r.IntN(1000)
		case x < 84:
			s.Kind = RestartEngine
			s.Engine = r.IntN(p.Engines)
		default:
			s = genFault(r, caps, down)
		}
		steps = append(steps, s)
	}
	return steps
}

// genReqs draws one to four requests of p's engines and subjects.
func genReqs(r *rand.Rand, p Scenario) []Req {
	var reqs []Req
	for range 1 + r.IntN(4) {
		q := Req{Engine: r.IntN(p.Engines), Subject: r.IntN(p.Subjects)}
		switch p.Mode {
		case "cost":
			q.Cost = 1 + r.Int64N(p.Windows[0].Limit)
		case "distinct":
			q.Value = r.IntN(5)
		}
		reqs = append(reqs, q)
	}
	return reqs
}

// genFault draws a node fault within caps: a node that is down comes back
// (with its data when caps.Persist allows, else empty); one that is up is
// killed, put to sleep or made to evict. down tracks the nodes killed.
func genFault(r *rand.Rand, caps Caps, down []bool) Step {
	s := Step{Node: r.IntN(len(down))}
	switch {
	case down[s.Node] && caps.Persist && r.IntN(2) == 0:
		s.Kind = Restart
	case down[s.Node]:
		s.Kind = RestartEmpty
	case caps.Sleep && r.IntN(4) == 0:
		s.Kind, s.D = Sleep, 400*time.Millisecond
	case caps.Evict && r.IntN(4) == 0:
		s.Kind = Evict
	default:
		s.Kind = Kill
	}
	down[s.Node] = s.Kind == Kill
	return s
}

// calendarStart places a scenario with a calendar window before the first
// local midnight after Origin by at most the steps' clock time, so that a
// new day starts among them.
func calendarStart(rc *rand.Rand, p Scenario) time.Duration {
	zone, err := time.LoadLocation(p.Zone)
	if err != nil {
		zone = time.UTC // the harness fails on the zone itself
	}
	var total time.Duration
	for _, s := range p.Steps {
		if s.Kind == Advance {
			total += s.D
		}
	}
	midnight := time.Date(Origin.Year(), Origin.Month(), Origin.Day(), 0, 0, 0, 0, zone)
	for !midnight.After(Origin) {
		midnight = midnight.AddDate(0, 0, 1)
	}
	return midnight.Sub(Origin) - time.Duration(rc.Int64N(int64(total)+1))
}
