package main

import (
	"context"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/slidelimit/slidelimit/rules"
)

// slidelimitCal is the 2-window group with a calendar month in the same
// limiter (key(bench):N/s,N/min,N/calendar month, in UTC, the default
// zone): every decision also reads and writes the subject's month counter,
// one more key of the same script call. The deny case fills the month with
// its first decision, so every measured decision is a denial by the
// calendar window (cached until the month's end, like any denial).
const slidelimitCal = "slidelimit calendar"

func init() {
	slidelimitLibraries = append(slidelimitLibraries, library{Name: slidelimitCal, Setup: setupCalendar})
}

func setupCalendar(_ context.Context, rdb *redis.Client, c benchCase) (*limiterSetup, error) {
	month := rules.Window{Limit: unreachable, Calendar: rules.CalendarMonth}
	if c.Deny {
		month.Limit = 1
	}
	return setupSlidelimit(rdb)(w(unreachable, time.Second), w(unreachable, time.Minute), month)
}
