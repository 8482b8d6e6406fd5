package replay

import (
	"cmp"
	"slices"
	"time"
)

// Report is the outcome of a replay.
type Report struct {
	// Lines is the number of lines read; Bad the unparseable ones and Late
	// those too far out of order, each with its first few named.
	Lines     int64
	Bad       int64
	BadFirst  []string
	Late      int64
	LateFirst []string
	// Unmatched counts the requests no route matched: reported, not
	// counted.
	Unmatched int64
	// Requests and Denied count the replayed requests and the would-be
	// denials.
	Requests, Denied int64
	// Subjects lists every subject with at least one request, most denied
	// first.
	Subjects []SubjectStats
	// Policies lists, per route, every window of every rule and each
	// rule's block, in rule order.
	Policies []PolicyStats
	// Minutes holds admitted and denied requests per Bucket of the log,
	// from its first bucket to its last, at most maxBuckets of them.
	Minutes []Minute
	// Bucket is the time each of Minutes covers: a minute for a log
	// spanning up to a week, coarser for a longer one.
	Bucket time.Duration
	// Notes name the statements ignored and how the replay decided.
	Notes []string
	// Decider says who decided: "in-process" or "script on ...".
	Decider string
	// First and Last are the times of the first and last replayed request.
	First, Last time.Time
	// Elapsed is how long the replay took.
	Elapsed time.Duration
}

// SubjectStats is one subject of the replay, named as the middleware
// counts it ("ip:203.0.113.7", "user:alice"). Requests counts the
// requests it was a subject of; Denied those denied by one of its own
// windows or blocks.
type SubjectStats struct {
	Subject  string `json:"subject"`
	Requests int64  `json:"requests"`
	Denied   int64  `json:"denied"`
}

// PolicyStats is one window of one rule of a route (Policy is its
// middleware policy name, as in "ip-1s"; Denied counts the requests it had
// no room for, but for those a block in force refused), or a rule's
// block (Policy "ip-block", Window "block:15m"; Denied counts the requests
// a block in force refused). A request two windows refused counts in both.
type PolicyStats struct {
	Route    string `json:"route"`
	Policy   string `json:"policy"`
	Rule     string `json:"limiter"`
	Window   string `json:"window"`
	Limit    int64  `json:"limit,omitempty"`
	Requests int64  `json:"requests"`
	Denied   int64  `json:"denied"`
	// Subjects is the number of subjects it denied at least once.
	Subjects int `json:"subjects"`
	// Blocks counts the blocks its denials started.
	Blocks int64 `json:"blocks"`
	// Top lists the subjects it denied most, at most TopN.
	Top []TopSubject `json:"top"`
}

// TopSubject is a subject a policy denied, with its first and last denial.
type TopSubject struct {
	Subject string    `json:"subject"`
	Denied  int64     `json:"denied"`
	First   time.Time `json:"first"`
	Last    time.Time `json:"last"`
}

// Minute is one bucket of the log's time series (Report.Bucket, one
// minute unless the log spans more than a week), starting at Start.
type Minute struct {
	Start            time.Time
	Admitted, Denied int64
}

// TopN is how many subjects a policy lists.
const TopN = 10

// policyStats gathers one PolicyStats.
type policyStats struct {
	PolicyStats
	denied map[string]*TopSubject
}

func newPolicyStats(route, policy, limiter, window string, limit int64) *policyStats {
	return &policyStats{PolicyStats: PolicyStats{Route: route, Policy: policy, Rule: limiter, Window: window, Limit: limit},
		denied: map[string]*TopSubject{}}
}

func (p *policyStats) deny(subject string, t int64) {
	p.Denied++
	ts := p.denied[subject]
	at := time.UnixMicro(t).UTC()
	if ts == nil {
		ts = &TopSubject{Subject: subject, First: at}
		p.denied[subject] = ts
	}
	ts.Denied++
	ts.Last = at
}

func (p *policyStats) final() PolicyStats {
	out := p.PolicyStats
	out.Subjects = len(p.denied)
	top := make([]TopSubject, 0, len(p.denied))
	for _, t := range p.denied {
		top = append(top, *t)
	}
	slices.SortFunc(top, func(a, b TopSubject) int {
		return cmp.Or(cmp.Compare(b.Denied, a.Denied), cmp.Compare(a.Subject, b.Subject))
	})
	out.Top = top[:min(len(top), TopN)]
	return out
}

// sortSubjects orders subjects most denied first, then most requests,
// then by name.
func sortSubjects(s []SubjectStats) {
	slices.SortFunc(s, func(a, b SubjectStats) int {
		return cmp.Or(cmp.Compare(b.Denied, a.Denied), cmp.Compare(b.Requests, a.Requests), cmp.Compare(a.Subject, b.Subject))
	})
}
