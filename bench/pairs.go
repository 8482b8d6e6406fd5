package main

import (
	"cmp"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"
)

// pair names two libraries whose decisions/s the report divides, run
// by run: Num's ÷ Den's.
type pair struct{ Num, Den string }

// parsePairs reads -pairs's value: pairs "A,B" separated by semicolons
// (library names hold slashes).
func parsePairs(s string) ([]pair, error) {
	var out []pair
	for _, f := range strings.Split(s, ";") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		num, den, ok := strings.Cut(f, ",")
		num, den = strings.TrimSpace(num), strings.TrimSpace(den)
		if !ok || num == "" || den == "" || strings.Contains(den, ",") {
			return nil, fmt.Errorf("bench: bad -pairs entry %q: want two library names, comma-separated", f)
		}
		out = append(out, pair{num, den})
	}
	return out, nil
}

// printPairs prints, for each pair, case and number of callers, the
// ratio of the two libraries' decisions/s in each round and the median of
// those ratios. The two runs of a round follow each other, so a ratio
// compares them under nearly the same load on the machine, which drifts
// between rounds by more than most changes being measured: the median of
// per-round ratios is steadier than the ratio of the table's medians.
func printPairs(w io.Writer, results []result, pairs []pair) {
	if len(pairs) == 0 {
		return
	}
	type runKey struct {
		lib, cas       string
		callers, round int
	}
	rate := map[runKey]float64{}
	cpu := map[runKey]time.Duration{}
	type rowKey struct {
		cas     string
		callers int
	}
	var rows []rowKey
	for _, r := range results {
		rate[runKey{r.Lib, r.Case, r.Callers, r.Round}] = r.rate()
		cpu[runKey{r.Lib, r.Case, r.Callers, r.Round}] = r.cpuPerDecision()
		if k := (rowKey{r.Case, r.Callers}); !slices.Contains(rows, k) {
			rows = append(rows, k)
		}
	}
	fmt.Fprintln(w, "\nPaired ratios (decisions/s of the first library ÷ the second's, per round; median and range over rounds;")
	fmt.Fprintln(w, "CPU: the first's CPU per decision, Redis and Go together, ÷ the second's, median over rounds, below 1 when the first spends less):")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "| ratio | case | callers | median | range | per round | CPU/decision ratio |")
	fmt.Fprintln(w, "|---|---|---:|---:|---|---|---:|")
	for _, p := range pairs {
		for _, k := range rows {
			var rs, cs []float64
			for round := 1; ; round++ {
				kn, kd := runKey{p.Num, k.cas, k.callers, round}, runKey{p.Den, k.cas, k.callers, round}
				num, ok1 := rate[kn]
				den, ok2 := rate[kd]
				if !ok1 && !ok2 {
					break
				}
				if ok1 && ok2 && den > 0 {
					rs = append(rs, num/den)
				}
				if ok1 && ok2 && cpu[kn] > 0 && cpu[kd] > 0 {
					cs = append(cs, float64(cpu[kn])/float64(cpu[kd]))
				}
			}
			if len(rs) == 0 {
				continue
			}
			each := make([]string, len(rs))
			for i, r := range rs {
				each[i] = fmt.Sprintf("%.2f", r)
			}
			sorted := slices.Clone(rs)
			slices.SortFunc(sorted, cmp.Compare)
			cpuRatio := "?"
			if len(cs) > 0 {
				slices.SortFunc(cs, cmp.Compare)
				cpuRatio = fmt.Sprintf("%.2f", median(cs))
			}
			fmt.Fprintf(w, "| %s ÷ %s | %s | %d | %.2f | %.2f–%.2f | %s | %s |\n", p.Num, p.Den, k.cas, k.callers,
				median(sorted), sorted[0], sorted[len(sorted)-1], strings.Join(each, " "), cpuRatio)
		}
	}
}

// median returns the median of sorted, which is not empty.
func median(sorted []float64) float64 {
	n := len(sorted)
	if n%2 == 1 {
		return sorted[n/2]
	}
	return (sorted[n/2-1] + sorted[n/2]) / 2
}
