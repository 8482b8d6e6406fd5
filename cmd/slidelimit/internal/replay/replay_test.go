package replay

import (
	"bytes"
	"compress/gzip"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/slidelimit/slidelimit/internal/lifecycle"
	"github.com/slidelimit/slidelimit/rules"
)

// req is one generated request.
type req struct {
	t      time.Time
	ip     string
	user   string // "" anonymous
	path   string
	status int
	bytes  int64
}

func (r req) clf() string {
	u := r.user
	if u == "" {
		u = "-"
	}
	b := fmt.Sprint(r.bytes)
	if r.bytes == 0 {
		b = "-"
	}
	return fmt.Sprintf("%s - %s [%s] \"GET %s HTTP/1.1\" %d %s \"-\" \"test\"\n", r.ip, u, r.t.Format("02/Jan/2006:15:04:05 -0700"), r.path, r.status, b)
}

func (r req) json() string {
	return fmt.Sprintf(`{"ts":%q,"remote_addr":%q,"user":%q,"request":"GET %s HTTP/1.1","status":%d,"size":%d}`+"\n",
		r.t.Format(time.RFC3339Nano), r.ip, r.user, r.path, r.status, r.bytes)
}

var t0 = time.Date(2026, 11, 25, 10, 0, 0, 0, time.UTC)

// traffic generates n requests over span from a few IPs and users, with
// bursts: every burstEvery-th second one IP sends a burst.
func traffic(rng *rand.Rand, n int, span time.Duration, res time.Duration) []req {
	var out []req
	ips := []string{"203.0.113.7", "203.0.113.8", "198.51.100.1", "2001:db8::1", "2001:db8::2"}
	users := []string{"", "", "alice", "bob", "carol"}
	for len(out) < n {
		at := t0.Add(time.Duration(rng.Int64N(int64(span)))).Truncate(res)
		burst := 1
		if rng.IntN(20) == 0 {
			burst = 5 + rng.IntN(30)
		}
		ip, user := ips[rng.IntN(len(ips))], users[rng.IntN(len(users))]
		for range burst {
			st := []int{200, 200, 200, 404, 500, 401}[rng.IntN(6)]
			out = append(out, req{t: at, ip: ip, user: user, path: fmt.Sprintf("/files/%d", rng.IntN(3)), status: st, bytes: rng.Int64N(3000)})
			at = at.Add(time.Duration(rng.IntN(3)) * res)
		}
	}
	return out[:n]
}

// shuffleNear moves requests out of order by up to d, as a log written at
// the end of requests is.
func shuffleNear(rng *rand.Rand, rs []req, d time.Duration) []req {
	type k struct {
		r   req
		key time.Time
	}
	ks := make([]k, len(rs))
	for i, r := range rs {
		ks[i] = k{r, r.t.Add(time.Duration(rng.Int64N(int64(d))))}
	}
	slices.SortStableFunc(ks, func(a, b k) int { return a.key.Compare(b.key) })
	out := make([]req, len(rs))
	for i := range ks {
		out[i] = ks[i].r
	}
	return out
}

// reference is an independent brute-force replay: it sorts the requests
// by time (stable), keeps every admitted request per rule and subject,
// and sums each window by scanning them all. It returns the denials per
// subject, attributed as the report does (a subject is denied when one of
// its own windows or blocks refused), and each request's decision in
// replay order.
func reference(g rules.Group, rs []req) (map[string][2]int64, []bool) {
	rs = slices.Clone(rs)
	slices.SortStableFunc(rs, func(a, b req) int { return a.t.Truncate(time.Microsecond).Compare(b.t.Truncate(time.Microsecond)) })
	type entry struct{ t, cost int64 }
	admitted := map[string][]entry{}
	blocked := map[string]int64{}
	per := map[string][2]int64{}
	var decisions []bool
	for _, r := range rs {
		t := r.t.UnixMicro()
		type chk struct {
			key, subject string
			cost         int64
			full         bool
			blocked      bool
			l            rules.Rule
		}
		var cs []chk
		ok, over := true, false
		for _, l := range g.Rules {
			ipSub := "ip:" + canon(r.ip)
			sub := ipSub
			if l.Kind == rules.User && r.user != "" {
				sub = "user:" + r.user
			}
			cost := int64(1)
			if l.Cost == "bytes" {
				cost = max(r.bytes, 1)
			} else if l.Cost != "" {
				fmt.Sscan(l.Cost, &cost)
			}
			c := chk{key: l.ID() + "|" + sub, subject: sub, cost: cost, l: l}
			for _, w := range l.Windows {
				if cost > 1 && cost > w.Limit {
					over = true
					c.full = true
				}
			}
			cs = append(cs, c)
		}
		if !over {
			for i := range cs {
				c := &cs[i]
				for _, w := range c.l.Windows {
					var used int64
					for _, e := range admitted[c.key] {
						if e.t > t-w.Period.Microseconds() {
							used += e.cost
						}
					}
					if used+c.cost > w.Limit {
						c.full, ok = true, false
					}
				}
				if blocked[c.key] > t {
					c.blocked, ok = true, false
				}
			}
			if !ok && g.Block > 0 {
				for _, c := range cs {
					if c.full && !c.blocked {
						blocked[c.key] = t + g.Block.Microseconds()
					}
				}
			}
			if ok && lifecycle.Counts(g.Count, r.status) {
				for _, c := range cs {
					admitted[c.key] = append(admitted[c.key], entry{t, c.cost})
				}
			}
		}
		ok = ok && !over
		decisions = append(decisions, ok)
		seen := map[string]bool{}
		denied := map[string]bool{}
		for _, c := range cs {
			seen[c.subject] = true
			if c.full || c.blocked {
				denied[c.subject] = true
			}
		}
		for s := range seen {
			v := per[s]
			v[0]++
			if denied[s] && !ok {
				v[1]++
			}
			per[s] = v
		}
	}
	return per, decisions
}

func canon(ip string) string {
	if strings.Contains(ip, ":") {
		return "2001:db8::/64" // the middleware counts IPv6 clients by /64
	}
	return ip
}

func writeLog(t *testing.T, name string, rs []req, line func(req) string) string {
	t.Helper()
	var b strings.Builder
	for _, r := range rs {
		b.WriteString(line(r))
	}
	p := filepath.Join(t.TempDir(), name)
	data := []byte(b.String())
	if strings.HasSuffix(name, ".gz") {
		var z bytes.Buffer
		w := gzip.NewWriter(&z)
		w.Write(data)
		w.Close()
		data = z.Bytes()
	}
	if err := os.WriteFile(p, data, 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func subjectsOf(rep *Report) map[string][2]int64 {
	m := map[string][2]int64{}
	for _, s := range rep.Subjects {
		m[s.Subject] = [2]int64{s.Requests, s.Denied}
	}
	return m
}

// TestReplayMatchesReference replays generated logs with bursts, out of
// order, and compares every subject's requests and denials with the
// brute-force reference.
func TestReplayMatchesReference(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name, rules string
		res         time.Duration
	}{
		{"one window", "ip:5/s", time.Second},
		{"several windows", "ip:5/s,20/min,60/10min", time.Second},
		{"ip and user", "ip:10/s,50/min; user:30/min", time.Second},
		{"block", "ip:5/s; block:30s", time.Second},
		{"count", "ip:4/s,10/min; count:2xx", time.Second},
		{"costs", "ip[bytes]:4000/s,20000/min; user[3]:12/s", time.Second},
		{"everything ms", "ip:3/100ms,8/s; user[bytes]:5000/10s; block:2s; count:2xx,404", time.Millisecond},
	}
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			rng := rand.New(rand.NewPCG(uint64(i), 7))
			rs := traffic(rng, 4000, 20*time.Minute, c.res)
			slices.SortStableFunc(rs, func(a, b req) int { return a.t.Compare(b.t) })
			logged := shuffleNear(rng, rs, 30*time.Second)
			var line func(req) string = req.clf
			if c.res < time.Second {
				line = req.json
			}
			p := writeLog(t, "access.log", logged, line)
			g := rules.MustParse(c.rules)
			// The reference sorts what was logged, stably: file order for
			// equal times.
			want, _ := reference(g, logged)
			rep, err := Run(context.Background(), Config{
				Routes: []RouteRules{{Text: c.rules, Origin: "-rules"}},
				Inputs: []Input{{Name: p}}, Decider: InProcess,
				Fields: Fields{Time: "ts", IP: "remote_addr", User: "user", Status: "status", Bytes: "size", Request: "request"},
			})
			if err != nil {
				t.Fatal(err)
			}
			got := subjectsOf(rep)
			var denied int64
			for _, v := range want {
				denied += v[1]
			}
			if denied == 0 {
				t.Fatal("the traffic denies nothing: the test would prove nothing")
			}
			if !mapsEqual(got, want) {
				t.Errorf("subjects (requests, denied):\n got  %v\n want %v", got, want)
			}
			if rep.Requests != int64(len(rs)) || rep.Bad != 0 || rep.Late != 0 {
				t.Errorf("requests %d bad %d late %d, want %d 0 0", rep.Requests, rep.Bad, rep.Late, len(rs))
			}
		})
	}
}

func mapsEqual(a, b map[string][2]int64) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

// TestReplayDemoLog reads back the access log the demo's load generator
// writes (cmd/demo's TestAccessLogFixture keeps the file its output).
func TestReplayDemoLog(t *testing.T) {
	t.Parallel()
	var statuses []int
	rep, err := Run(context.Background(), Config{
		Routes: []RouteRules{{Text: "user:1000/s"}}, Inputs: []Input{{Name: "../../../demo/testdata/access.log"}},
		OnDecision: func(r Record, _ bool) { statuses = append(statuses, r.Status) }})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Bad != 0 || rep.Requests != 5 || rep.Subjects[0].Subject != "user:alice" || !slices.Equal(statuses, []int{200, 200, 200, 429, 200}) {
		t.Errorf("replayed %d lines (bad %d), subjects %v, statuses %v", rep.Requests, rep.Bad, rep.Subjects, statuses)
	}
}
