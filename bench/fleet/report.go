package main

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"time"
)

// report prints what a run did: the utilization and 429s, then per class,
// per tenant, per key and the block, when the run had them. The caller
// holds up.mu.
func report(c config, up *upstream, start time.Time) {
	// A sliding window of limit calls per period admits at most limit ×
	// ⌈run/period⌉ calls over the run [start, end): all at once at start,
	// start+period, ... (per key: each key has its own).
	run := c.duration
	keys := float64(max(c.keys, 1))
	throttlePeriod := time.Duration(float64(c.period)*(1+c.margin)) + c.transit
	allowed := keys * float64(c.limit) * float64((run+c.period-1)/c.period)
	allowedThrottle := keys * float64(c.limit) * float64((run+throttlePeriod-1)/throttlePeriod)
	util, utilThrottle := float64(len(up.accepted))/allowed, float64(len(up.accepted))/allowedThrottle
	what, gaps := "calls", ""
	switch {
	case c.tokens > 0:
		// The token limit binds (calls cost 100 on average), and when its
		// window has room is not known here: no idle gap.
		what, gaps = "tokens", "idle gap not measured (a token window)"
		util = float64(up.used) / (float64(c.tokens) * float64((run+c.period-1)/c.period))
		utilThrottle = float64(up.used) / (float64(c.tokens) * float64((run+throttlePeriod-1)/throttlePeriod))
	case c.keys > 1:
		gaps = "idle gap not measured (several keys)"
	default:
		var adm []time.Time // every call the throttle admitted, the refused too
		for _, a := range up.arrivals {
			if !a.admitted.IsZero() {
				adm = append(adm, a.admitted)
			}
		}
		var ws []span
		for _, w := range up.waits {
			ws = append(ws, span{w.from, w.to})
		}
		gap, at, over := idleGap(adm, ws, c.limit, throttlePeriod, 100*time.Millisecond)
		gaps = fmt.Sprintf("longest idle gap with room %v (at +%v), gaps ≥ 100ms: %d",
			gap.Round(time.Millisecond), at.Sub(start).Round(time.Millisecond), over)
	}
	fmt.Printf("accepted %d calls in %v: %s utilization %.1f%% of the upstream's limit, %.1f%% of the throttle's; 429s %d; %s\n",
		len(up.accepted), run.Round(time.Millisecond), what, 100*util, 100*utilThrottle, up.refused, gaps)
	reportClasses(up)
	reportTenants(up)
	if c.keys > 1 {
		reportKeys(c, up)
	}
	if c.block > 0 {
		reportBlock(c, up)
	}
}

// reportClasses prints each class's share of the admissions and its
// waits' percentiles, when the workers have classes.
func reportClasses(up *upstream) {
	n := map[string]int{}
	for _, a := range up.accepted {
		n[a.class]++
	}
	if len(n) < 2 && n[""] > 0 {
		return
	}
	waits := map[string][]time.Duration{}
	for _, w := range up.waits {
		if w.ok {
			waits[w.class] = append(waits[w.class], w.to.Sub(w.from))
		}
	}
	for _, class := range sortedKeys(n) {
		p50, p99 := percentiles(waits[class])
		fmt.Printf("  class %-10s %5d admitted, %5.1f%% of all; wait p50 %v p99 %v\n",
			class, n[class], 100*float64(n[class])/float64(len(up.accepted)), p50.Round(time.Millisecond), p99.Round(time.Millisecond))
	}
}

// reportTenants prints the admissions of each tenant, how far each is
// from their mean, and Jain's fairness index (Σx)² / (n·Σx²): 1 when all
// are equal, 1/n when one has everything.
func reportTenants(up *upstream) {
	n := map[string]int{}
	for _, a := range up.accepted {
		if a.tenant != "" {
			n[a.tenant]++
		}
	}
	if len(n) < 2 {
		return
	}
	names := sortedKeys(n)
	var xs []float64
	var parts []string
	for _, t := range names {
		xs = append(xs, float64(n[t]))
		parts = append(parts, fmt.Sprintf("%s %d", t, n[t]))
	}
	mean, worst := 0.0, 0.0
	for _, x := range xs {
		mean += x / float64(len(xs))
	}
	for _, x := range xs {
		worst = max(worst, math.Abs(x-mean)/mean)
	}
	fmt.Printf("  tenants: %s; mean %.1f, farthest %.1f%% from it; Jain %.3f\n",
		strings.Join(parts, ", "), mean, 100*worst, jain(xs))
}

// jain is Jain's fairness index of xs.
func jain(xs []float64) float64 {
	var sum, sq float64
	for _, x := range xs {
		sum += x
		sq += x * x
	}
	if sq == 0 {
		return 1
	}
	return sum * sum / (float64(len(xs)) * sq)
}

// reportKeys prints each key's accepted calls and the most arrivals (the
// refused and the block's too) and acceptances in any period.
func reportKeys(c config, up *upstream) {
	byKey := map[string][]time.Time{}
	okByKey := map[string][]time.Time{}
	for _, a := range up.arrivals {
		if !a.blocked {
			byKey[a.key] = append(byKey[a.key], a.at)
		}
	}
	for _, a := range up.accepted {
		okByKey[a.key] = append(okByKey[a.key], a.at)
	}
	var parts []string
	for _, k := range sortedKeys(byKey) {
		parts = append(parts, fmt.Sprintf("%s %d accepted (most in any %v: %d arrived, %d accepted)",
			k, len(okByKey[k]), c.period, mostIn(byKey[k], c.period), mostIn(okByKey[k], c.period)))
	}
	fmt.Printf("  keys: %s\n", strings.Join(parts, "; "))
}

// mostIn returns the most times of ts within any span of d.
func mostIn(ts []time.Time, d time.Duration) int {
	s := slices.Clone(ts)
	slices.SortFunc(s, func(a, b time.Time) int { return a.Compare(b) })
	most, j := 0, 0
	for i := range s {
		for s[i].Sub(s[j]) >= d {
			j++
		}
		most = max(most, i-j+1)
	}
	return most
}

// reportBlock prints the block of k0 and the calls the processes sent on
// k0 during it: the blocked process's, and the others'.
func reportBlock(c config, up *upstream) {
	b := up.block
	if b.end.IsZero() {
		fmt.Println("  block: no call on k0 after halfway")
		return
	}
	same, other, otherLate := 0, 0, 0
	for _, a := range up.arrivals {
		if !a.blocked || a.at.Equal(b.from) {
			continue
		}
		if !a.other {
			same++
			continue
		}
		other++
		if a.at.Sub(b.from) > c.transit+100*time.Millisecond {
			otherLate++
		}
	}
	fmt.Printf("  block: k0 blocked %ds by a 429 to process %d; calls on k0 during the block: %d from it, %d from the others (%d of them over %v after the 429)\n",
		c.block, b.proc, same, other, otherLate, c.transit+100*time.Millisecond)
}

// percentiles returns the median and 99th percentile of ds.
func percentiles(ds []time.Duration) (time.Duration, time.Duration) {
	if len(ds) == 0 {
		return 0, 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[(len(s)-1)*50/100], s[(len(s)-1)*99/100]
}

// sortedKeys returns m's keys in order.
func sortedKeys[V any](m map[string]V) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}
