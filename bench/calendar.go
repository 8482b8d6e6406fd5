package main

import (
	"context"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/slidelimit/slidelimit/internal/ruletime"
	"github.com/slidelimit/slidelimit/rules"
)

// Two groups with a calendar month (in UTC, the default zone), beside the
// 2-window group (N/s,N/min):
//
//   - slidelimitCal2 is a 2-window group whose second window is the
//     calendar month, key(bench):N/min,N/calendar month, the shape of the
//     issue's examples (a sliding day and a calendar month): the like-for-
//     like row, two windows each.
//   - slidelimitCal is the 2-window group with a calendar month added,
//     key(bench):N/s,N/min,N/calendar month: three windows, what adding a
//     calendar window to a group costs.
//
// Every decision of either reads and writes the subject's month counter,
// one more key of the same script call. The deny case fills the month with
// its first decision, so every measured decision is a denial by the
// calendar window (cached until the month's end, like any denial).
const (
	slidelimitCal  = "slidelimit calendar"
	slidelimitCal2 = "slidelimit calendar 2-window"
)

func init() {
	slidelimitLibraries = append(slidelimitLibraries,
		library{Name: slidelimitCal, Setup: func(_ context.Context, rdb *redis.Client, c benchCase) (*limiterSetup, error) {
			return setupSlidelimit(rdb)(w(unreachable, time.Second), w(unreachable, time.Minute), calMonth(c))
		}},
		library{Name: slidelimitCal2, Setup: func(_ context.Context, rdb *redis.Client, c benchCase) (*limiterSetup, error) {
			return setupSlidelimit(rdb)(w(unreachable, time.Minute), calMonth(c))
		}})
}

// calMonth is the calendar month of the calendar groups: unreachable, or
// filled by one request in the deny case.
func calMonth(c benchCase) rules.Window {
	month := rules.Window{Limit: unreachable, Calendar: ruletime.Month}
	if c.Deny {
		month.Limit = 1
	}
	return month
}
