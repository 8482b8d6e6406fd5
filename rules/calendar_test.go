package rules

import (
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestCalendarParse(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in, want string
		limiter  Limiter
	}{
		{"user[bytes]:1Gi/d~15min,100Gi/calendar month; calendar:Asia/Shanghai",
			"user[bytes]:1073741824/d~15min,107374182400/calendar month; calendar:Asia/Shanghai",
			Limiter{Kind: User, Cost: "bytes", Windows: []Window{
				{Limit: 1 << 30, Period: 24 * time.Hour, Grain: 15 * time.Minute},
				{Limit: 100 << 30, Calendar: CalendarMonth}}}},
		{"key(tenant):$quota/calendar month", "key(tenant):$quota/calendar month",
			Limiter{Kind: Key, Name: "tenant", Windows: []Window{{LimitFunc: "quota", Calendar: CalendarMonth}}}},
		{"ip : 3 / calendar  day , 5/calendar week", "ip:3/calendar day,5/calendar week",
			Limiter{Kind: IP, Windows: []Window{{Limit: 3, Calendar: CalendarDay}, {Limit: 5, Calendar: CalendarWeek}}}},
		{"ip:200000/calendar day", "ip:200000/calendar day",
			Limiter{Kind: IP, Windows: []Window{{Limit: 200000, Calendar: CalendarDay}}}},
		{"user:10/min,200/d; user[bytes]:1Gi/d; distinct:path", "user:10/min,200/d; user[bytes]:1073741824/d; distinct:path",
			Limiter{Kind: User, Windows: []Window{{Limit: 10, Period: time.Minute}, {Limit: 200, Period: 24 * time.Hour}}}},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			t.Parallel()
			g, err := Parse(tt.in)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(g.Limiters[0], tt.limiter) {
				t.Errorf("limiter %#v, want %#v", g.Limiters[0], tt.limiter)
			}
			if g.String() != tt.want {
				t.Errorf("String %q, want %q", g.String(), tt.want)
			}
			back, err := Parse(g.String())
			if err != nil || !reflect.DeepEqual(back, g) {
				t.Errorf("round trip: %v, %#v", err, back)
			}
			if err := g.Validate(); err != nil {
				t.Errorf("Validate: %v", err)
			}
		})
	}
}

func TestCalendarStatements(t *testing.T) {
	t.Parallel()
	g := MustParse("ip:5/min; ip[bytes]:5Gi/calendar day; calendar:Asia/Shanghai; distinct:files")
	if g.Calendar != "Asia/Shanghai" || g.Distinct != "files" {
		t.Fatalf("got %q, %q", g.Calendar, g.Distinct)
	}
	loc, err := g.Zone()
	if err != nil || loc.String() != "Asia/Shanghai" {
		t.Fatalf("Zone: %v, %v", loc, err)
	}
	if !g.hasCalendar() {
		t.Error("hasCalendar false")
	}
	var none Group
	if loc, err := none.Zone(); err != nil || loc != time.UTC {
		t.Errorf("default zone %v, %v; want UTC", loc, err)
	}
}

func TestCalendarErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in     string
		off    int
		cat    error
		reason string
	}{
		{"ip:5/calendar day; calendar:Mars/Olympus", 28, ErrInvalid, `unknown time zone "Mars/Olympus"`},
		{"ip:5/calendar day; calendar:Local", 28, ErrInvalid, "local zone"},
		{"ip:5/calendar fortnight", 14, ErrSyntax, `unknown calendar unit "fortnight"`},
		{"ip:5/calendar", 13, ErrSyntax, "expected day, week or month"},
		{"ip:5/calendar day~1h", 17, ErrInvalid, "takes no grain"},
		{"ip:5 concurrent/calendar day", 15, ErrInvalid, "no calendar period"},
		{"ip:5/calendar day,6/calendar day", 18, ErrInvalid, "duplicate calendar day"},
		{"ip:5/calendar day; calendar:UTC; calendar:UTC", 33, ErrInvalid, "duplicate calendar statement"},
		{"ip:5/min; distinct:path; distinct:ua", 25, ErrInvalid, "duplicate distinct statement"},
		{"ip:5/min; distinct:a/b", 19, ErrInvalid, `invalid distinct name "a/b"`},
		{"ip:5/min; distinct:", 19, ErrSyntax, "expected path or a key function"},
		{"ip:5/min,100/d~1h; distinct:path", 9, ErrInvalid, "counts distinct values"},
		{"ip[bytes]:5/min,100/d~1h; ip:3/calendar day; distinct:path", 29, ErrInvalid, "counts distinct values"},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			t.Parallel()
			_, err := Parse(tt.in)
			var e *Error
			if !errors.As(err, &e) {
				t.Fatalf("err %v, want *Error", err)
			}
			if e.Offset != tt.off || !errors.Is(err, tt.cat) || !strings.Contains(e.Reason, tt.reason) {
				t.Errorf("err %v (offset %d), want %q at %d", err, e.Offset, tt.reason, tt.off)
			}
		})
	}
}

func TestCalendarValidateGo(t *testing.T) {
	t.Parallel()
	tests := []struct {
		w      Window
		reason string
	}{
		{Window{Limit: 1, Calendar: "year"}, `unknown calendar unit "year"`},
		{Window{Limit: 1, Calendar: CalendarDay, Concurrent: true}, "no calendar period"},
		{Window{Limit: 1, Calendar: CalendarDay, Period: time.Hour}, "has no period"},
		{Window{Limit: 1, Calendar: CalendarDay, Grain: time.Hour}, "takes no grain"},
	}
	for _, tt := range tests {
		g := Group{Limiters: []Limiter{{Kind: IP, Windows: []Window{tt.w}}}}
		if err := g.Validate(); err == nil || !strings.Contains(err.Error(), tt.reason) {
			t.Errorf("%+v: %v, want %q", tt.w, err, tt.reason)
		}
	}
}

// TestCalendarBounds steps through the periods that are not 24 hours or
// 30 days long: DST days, February, ISO weeks.
func TestCalendarBounds(t *testing.T) {
	t.Parallel()
	ny, _ := LoadZone("America/New_York")
	sh, _ := LoadZone("Asia/Shanghai")
	tests := []struct {
		c          Calendar
		at         time.Time
		start, end time.Time
		length     time.Duration
	}{
		{CalendarDay, time.Date(2026, 3, 8, 12, 0, 0, 0, ny), time.Date(2026, 3, 8, 0, 0, 0, 0, ny), time.Date(2026, 3, 9, 0, 0, 0, 0, ny), 23 * time.Hour},
		{CalendarDay, time.Date(2026, 11, 1, 12, 0, 0, 0, ny), time.Date(2026, 11, 1, 0, 0, 0, 0, ny), time.Date(2026, 11, 2, 0, 0, 0, 0, ny), 25 * time.Hour},
		{CalendarMonth, time.Date(2028, 2, 10, 0, 0, 0, 0, sh), time.Date(2028, 2, 1, 0, 0, 0, 0, sh), time.Date(2028, 3, 1, 0, 0, 0, 0, sh), 29 * 24 * time.Hour},
		{CalendarMonth, time.Date(2026, 12, 31, 23, 59, 50, 0, sh), time.Date(2026, 12, 1, 0, 0, 0, 0, sh), time.Date(2027, 1, 1, 0, 0, 0, 0, sh), 31 * 24 * time.Hour},
		{CalendarWeek, time.Date(2026, 11, 29, 23, 0, 0, 0, time.UTC), time.Date(2026, 11, 23, 0, 0, 0, 0, time.UTC), time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC), 7 * 24 * time.Hour},
		{CalendarWeek, time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC), time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC), time.Date(2026, 12, 7, 0, 0, 0, 0, time.UTC), 7 * 24 * time.Hour},
	}
	for _, tt := range tests {
		s, e := tt.c.Bounds(tt.at, tt.at.Location())
		if !s.Equal(tt.start) || !e.Equal(tt.end) || e.Sub(s) != tt.length {
			t.Errorf("%s at %v: [%v, %v) (%v), want [%v, %v) (%v)", tt.c, tt.at, s, e, e.Sub(s), tt.start, tt.end, tt.length)
		}
	}
}
