package engine

import "sync"

// call is one Allow or Peek on its way through a batch. Calls are pooled:
// they carry the buffers a request needs, so the steady state allocates
// little beyond the Decision.
type call struct {
	mode   uint8 // opAllow or opPeek
	plan   plan
	id     int64  // snowflake id of an allow; 0 for peek
	member []byte // id in decimal; empty for peek
	all    []int32

	// Outcome, written by the batch leader before it wakes the call.
	sent, recv int64 // e.mono when the batch was sent and answered
	wall       int64 // local wall clock (µs) when it was answered
	sec, usec  int64
	status     int64
	suffix     int64
	res        []int64 // per merged window: used, reset, wait
	err        error   // Redis did not decide: the fail mode must
	warn       error   // Redis decided, but something went wrong after (a rollback)

	// Batching.
	wake chan uint8
	lead []*call  // the batch this call leads
	args []any    // command arguments built by a leader
	ctx  batchCtx // the context of the script calls it leads (single server)
	flat flatArgs

	// Failure domains: those the call needs, and those it probes (it is
	// the one call asking them while they are considered down).
	doms   []*domain
	probes []*domain

	// Slot mode: the call's keys grouped by script call.
	parts []int32 // key indices, part by part
	pends []int32 // end of part i in parts
	pstat []int64 // per part: status, or -1 when the part failed
	psuf  []int64 // per part: suffix
	pdom  []*domain
}

var callPool = sync.Pool{New: func() any { return &call{wake: make(chan uint8, 1)} }}

func getCall() *call { return callPool.Get().(*call) }

func putCall(c *call) {
	c.err, c.warn = nil, nil
	clear(c.plan.keys) // drop the key string
	c.plan.keys = c.plan.keys[:0]
	callPool.Put(c)
}

// prepare sizes the outcome fields for c.plan.
func (c *call) prepare() {
	n := 3 * len(c.plan.wins)
	if cap(c.res) < n {
		c.res = make([]int64, n)
	}
	c.res = c.res[:n]
	c.all = c.all[:0]
	for i := range c.plan.keys {
		c.all = append(c.all, int32(i))
	}
	c.status, c.suffix, c.err, c.warn = 0, 0, nil, nil
}
