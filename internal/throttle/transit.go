package throttle

import (
	"context"
	"slices"
	"time"

	"github.com/slidelimit/slidelimit/internal/rulelimits"
	"github.com/slidelimit/slidelimit/internal/ruletime"
	"github.com/slidelimit/slidelimit/rules"
)

// DefaultTransit is the transit bound of a throttle built without one:
// the longest a call takes from its admission to the upstream.
const DefaultTransit = 50 * time.Millisecond

// stretch returns the windows the engine counts for ws under transit
// bound d: a sliding window keeps each call d longer (rounded up to
// whole grains), so that an upstream counting at arrival sees no more
// than the limit in any of its windows (docs/throttle.md, Transit bound).
// Calendar and in-flight windows are returned as they are.
func stretch(ws []rules.Window, d time.Duration) []rules.Window {
	out := make([]rules.Window, len(ws))
	for i, w := range ws {
		if d > 0 && !w.Concurrent && w.Calendar == "" {
			ext := d
			if w.Grain > 0 {
				ext = (d + w.Grain - 1) / w.Grain * w.Grain
			}
			w.Period = min(w.Period+ext, rulelimits.MaxPeriod)
		}
		out[i] = w
	}
	return out
}

// declared returns the window w stretch made under d as it was declared,
// for what the hooks report. A period stretch capped is left as it is.
func declared(w rules.Window, d time.Duration) rules.Window {
	if d <= 0 || w.Concurrent || w.Calendar != "" || w.Period >= rulelimits.MaxPeriod {
		return w
	}
	ext := d
	if w.Grain > 0 {
		ext = (d + w.Grain - 1) / w.Grain * w.Grain
	}
	if w.Period > ext {
		w.Period -= ext
	}
	return w
}

// calendars returns the calendar units of g's windows, each once.
func calendars(g rules.Group) []string {
	var units []string
	for _, l := range g.Rules {
		for _, w := range l.Windows {
			if w.Calendar != "" && !slices.Contains(units, w.Calendar) {
				units = append(units, w.Calendar)
			}
		}
	}
	return units
}

// hold returns how long a call must wait at now before it may be
// admitted: until the end of a calendar period of p's windows when now is
// within the transit bound of it, so that no call sent in one period
// arrives in the next; 0 otherwise.
func (p *Plan) hold(now time.Time) time.Duration {
	var wait time.Duration
	for _, u := range p.cals {
		_, end := ruletime.Bounds(u, now, p.zone)
		if left := end.Sub(now); left > 0 && left < p.transit {
			wait = max(wait, left)
		}
	}
	return wait
}

// holdOff waits out p.hold: it returns at once outside the last transit
// bound of a calendar period, and ctx.Err() when ctx ends first.
func (p *Plan) holdOff(ctx context.Context) error {
	for {
		d := p.hold(time.Now())
		if d <= 0 {
			return nil
		}
		tm := time.NewTimer(d)
		select {
		case <-ctx.Done():
			tm.Stop()
			return ctx.Err()
		case <-tm.C:
		}
	}
}
