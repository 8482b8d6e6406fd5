package ruletime

import (
	"testing"
	"time"
)

// TestCalendarBounds steps through the periods that are not 24 hours or
// 30 days long: DST days, February, ISO weeks.
func TestCalendarBounds(t *testing.T) {
	t.Parallel()
	ny, _ := LoadZone("America/New_York")
	sh, _ := LoadZone("Asia/Shanghai")
	tests := []struct {
		c          string
		at         time.Time
		start, end time.Time
		length     time.Duration
	}{
		{Day, time.Date(2026, 3, 8, 12, 0, 0, 0, ny), time.Date(2026, 3, 8, 0, 0, 0, 0, ny), time.Date(2026, 3, 9, 0, 0, 0, 0, ny), 23 * time.Hour},
		{Day, time.Date(2026, 11, 1, 12, 0, 0, 0, ny), time.Date(2026, 11, 1, 0, 0, 0, 0, ny), time.Date(2026, 11, 2, 0, 0, 0, 0, ny), 25 * time.Hour},
		{Month, time.Date(2028, 2, 10, 0, 0, 0, 0, sh), time.Date(2028, 2, 1, 0, 0, 0, 0, sh), time.Date(2028, 3, 1, 0, 0, 0, 0, sh), 29 * 24 * time.Hour},
		{Month, time.Date(2026, 12, 31, 23, 59, 50, 0, sh), time.Date(2026, 12, 1, 0, 0, 0, 0, sh), time.Date(2027, 1, 1, 0, 0, 0, 0, sh), 31 * 24 * time.Hour},
		{Week, time.Date(2026, 11, 29, 23, 0, 0, 0, time.UTC), time.Date(2026, 11, 23, 0, 0, 0, 0, time.UTC), time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC), 7 * 24 * time.Hour},
		{Week, time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC), time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC), time.Date(2026, 12, 7, 0, 0, 0, 0, time.UTC), 7 * 24 * time.Hour},
	}
	for _, tt := range tests {
		s, e := Bounds(tt.c, tt.at, tt.at.Location())
		if !s.Equal(tt.start) || !e.Equal(tt.end) || e.Sub(s) != tt.length {
			t.Errorf("%s at %v: [%v, %v) (%v), want [%v, %v) (%v)", tt.c, tt.at, s, e, e.Sub(s), tt.start, tt.end, tt.length)
		}
	}
}
