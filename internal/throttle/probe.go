package throttle

// FleetLease is how long a participant's entry in a lane's fleet queue
// lives without a renewal.
const FleetLease = fleetLease

// LaneState is what a lane holds, for the root package's fault harness.
type LaneState struct {
	ID      string // the lane's id
	Waiters int    // callers queued in this process
	Joined  bool   // this process has an entry in the fleet's queue
	Queue   string // the Redis key of the fleet's queue
}

// Lanes returns the state of t's lanes, in no order.
func (t *Throttle) Lanes() []LaneState {
	t.mu.Lock()
	lanes := make([]*lane, 0, len(t.lanes))
	for _, ln := range t.lanes {
		lanes = append(lanes, ln)
	}
	t.mu.Unlock()
	out := make([]LaneState, len(lanes))
	for i, ln := range lanes {
		ln.mu.Lock()
		out[i] = LaneState{ID: ln.id, Waiters: len(ln.q), Joined: ln.joined, Queue: t.fleet.keys(ln)[0]}
		ln.mu.Unlock()
	}
	return out
}

// Member returns this process's member in the fleet's queues.
func (t *Throttle) Member() string { return t.fleet.member }
