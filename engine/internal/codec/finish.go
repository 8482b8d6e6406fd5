package codec

// Undo is the finish of a request in one key (see the finish ops of
// lua/multi_window.lua): a removal of its member, or a change of its cost
// in a weighted key. The undos of failed calls and rollbacks remove; a
// Finish that fails queues its own.
type Undo struct {
	Key    string
	Member string
	Suffix int64 // the script's suffix, or -1 when unknown: remove all
	// Until is the local time in µs after which the entry counts no
	// more. A finish's undo is made with Until 0 and longest, its key's
	// longest period in µs: push sets Until when it is queued.
	Until   int64
	Longest int64
	Kind    byte  // kindCount, kindSlot or kindWeighted
	Cost    int64 // the request's cost in a weighted key; 0 in others
	// A weighted key's change: the change of the request's cost and the
	// mode ('r' removal, 's' settlement, 'g' settlement with grains).
	Delta int64
	Mode  byte
	At    int64 // the request's decision time (µs since 1970); 0 when unknown
	Grain int64 // mode 'g': the key's coarsest grain (µs)
	// kindCal: the counter of the period starting at Cal (µs since 1970;
	// 0: unknown, nothing changes) changes by delta.
	Cal int64
	// kindDistinct: the Value's member scored at gets its old score prev
	// back (1: removed); prev 0 changes nothing.
	Value string
	Prev  int64
}

// Publishes reports whether u removes an entry that cached denials may
// rely on: slot keys make none, and a settlement changes no count.
func (u *Undo) Publishes() bool {
	return u.Kind == KindCount || u.Kind == KindWeighted && u.Mode == 'r' ||
		u.Kind == KindCal && u.Delta < 0 || u.Kind == KindDistinct
}

// Kinds of the keys a request took, as finish ops name them (see
// lua/multi_window.lua).
const (
	KindCount    = 'C'
	KindSlot     = 'S'
	KindWeighted = 'W'
	KindCal      = 'A' // a calendar key (see plan.CalKey)
	KindDistinct = 'R' // a distinct key (see plan.Plan.Distinct)
)
