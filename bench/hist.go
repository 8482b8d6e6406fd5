package main

import (
	"math/bits"
	"time"
)

// histSub is the number of sub-buckets per power of two: latencies are
// recorded with a relative error below 1/histSub (about 3%).
const histSub = 32

// hist is a fixed-size log-linear latency histogram. Recording never
// allocates, so it does not disturb the allocation counts of the libraries
// under test.
type hist struct {
	counts [64 * histSub]uint64
	n      uint64
}

func histIndex(v uint64) int {
	if v < 2*histSub {
		return int(v)
	}
	shift := bits.Len64(v) - 6 // v>>shift is in [32, 64)
	return (shift+1)*histSub + int(v>>shift) - histSub
}

// histLower returns the smallest value recorded in bucket i and the width
// of the bucket.
func histLower(i int) (lower, width uint64) {
	if i < 2*histSub {
		return uint64(i), 1
	}
	shift := i/histSub - 1
	mant := uint64(i%histSub + histSub)
	return mant << shift, 1 << shift
}

func (h *hist) record(d time.Duration) {
	if d < 0 {
		d = 0
	}
	h.counts[histIndex(uint64(d))]++
	h.n++
}

func (h *hist) merge(o *hist) {
	for i, c := range o.counts {
		h.counts[i] += c
	}
	h.n += o.n
}

// quantile returns the q-quantile (0 < q <= 1), as the middle of its bucket.
func (h *hist) quantile(q float64) time.Duration {
	if h.n == 0 {
		return 0
	}
	rank := uint64(q*float64(h.n) + 0.5)
	if rank < 1 {
		rank = 1
	}
	var seen uint64
	for i, c := range h.counts {
		seen += c
		if seen >= rank {
			lo, w := histLower(i)
			return time.Duration(lo + w/2)
		}
	}
	return 0
}
