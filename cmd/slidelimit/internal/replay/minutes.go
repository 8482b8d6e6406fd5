package replay

import (
	"slices"
	"time"
)

// maxBuckets bounds the report's time series (Report.Minutes): a log
// spanning up to a week has a bucket per minute; a longer one has coarser
// buckets, so that the series, and the memory that gathers it, stay
// bounded whatever the span between the first and the last line.
const maxBuckets = 7 * 24 * 60

// bucketWidths are the bucket widths in minutes, each a multiple of the
// one before so that coarsening merges whole buckets; beyond the last,
// the width doubles.
var bucketWidths = []int64{1, 5, 15, 60, 360, 1440}

// timeline counts admitted and denied requests per bucket of width
// minutes. It holds at most maxBuckets buckets: a request beyond makes
// the buckets coarser.
type timeline struct {
	width  int64             // minutes per bucket; 0 until the first request
	counts map[int64]*Minute // bucket index (minute / width) → counts
	lo, hi int64             // lowest and highest index held
}

// add counts a request at t (µs since 1970).
func (tl *timeline) add(t int64, allowed bool) {
	minute := floorDiv(t, 60e6)
	if tl.width == 0 {
		tl.width, tl.counts = 1, map[int64]*Minute{}
		tl.lo, tl.hi = minute, minute
	}
	k := floorDiv(minute, tl.width)
	for max(tl.hi, k)-min(tl.lo, k) >= maxBuckets {
		tl.coarsen()
		k = floorDiv(minute, tl.width)
	}
	tl.lo, tl.hi = min(tl.lo, k), max(tl.hi, k)
	m := tl.counts[k]
	if m == nil {
		m = &Minute{Start: time.UnixMicro(k * tl.width * 60e6).UTC()}
		tl.counts[k] = m
	}
	if allowed {
		m.Admitted++
	} else {
		m.Denied++
	}
}

// coarsen moves the counts to buckets of the next width.
func (tl *timeline) coarsen() {
	w := tl.width * 2
	if i := slices.Index(bucketWidths, tl.width); i >= 0 && i+1 < len(bucketWidths) {
		w = bucketWidths[i+1]
	}
	old := tl.counts
	tl.counts = make(map[int64]*Minute, len(old))
	for k, m := range old {
		nk := floorDiv(k*tl.width, w)
		if into := tl.counts[nk]; into != nil {
			into.Admitted += m.Admitted
			into.Denied += m.Denied
			continue
		}
		m.Start = time.UnixMicro(nk * w * 60e6).UTC()
		tl.counts[nk] = m
	}
	tl.lo, tl.hi = floorDiv(tl.lo*tl.width, w), floorDiv(tl.hi*tl.width, w)
	tl.width = w
}

// series returns every bucket from the first to the last, empty ones
// included, and their width.
func (tl *timeline) series() ([]Minute, time.Duration) {
	if tl.width == 0 {
		return nil, time.Minute
	}
	out := make([]Minute, 0, tl.hi-tl.lo+1)
	for k := tl.lo; k <= tl.hi; k++ {
		if m := tl.counts[k]; m != nil {
			out = append(out, *m)
		} else {
			out = append(out, Minute{Start: time.UnixMicro(k * tl.width * 60e6).UTC()})
		}
	}
	return out, time.Duration(tl.width) * time.Minute
}

// floorDiv is a / b rounded down (b > 0).
func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 && a < 0 {
		q--
	}
	return q
}
