package rules

import (
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/slidelimit/slidelimit/internal/ruletime"
)

func TestCalendarParse(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in, want string
		rule     Rule
	}{
		{"user[bytes]:1Gi/d~15min,100Gi/calendar month; calendar:Asia/Shanghai",
			"user[bytes]:1073741824/d~15min,107374182400/calendar month; calendar:Asia/Shanghai",
			Rule{Kind: User, Cost: "bytes", Windows: []Window{
				{Limit: 1 << 30, Period: 24 * time.Hour, Grain: 15 * time.Minute},
				{Limit: 100 << 30, Calendar: ruletime.Month}}}},
		{"key(tenant):$quota/calendar month", "key(tenant):$quota/calendar month",
			Rule{Kind: Key, Name: "tenant", Windows: []Window{{LimitFunc: "quota", Calendar: ruletime.Month}}}},
		{"ip : 3 / calendar  day , 5/calendar week", "ip:3/calendar day,5/calendar week",
			Rule{Kind: IP, Windows: []Window{{Limit: 3, Calendar: ruletime.Day}, {Limit: 5, Calendar: ruletime.Week}}}},
		{"ip:200000/calendar day", "ip:200000/calendar day",
			Rule{Kind: IP, Windows: []Window{{Limit: 200000, Calendar: ruletime.Day}}}},
		{"user:10/min,200/d; user[bytes]:1Gi/d; distinct:path", "user:10/min,200/d; user[bytes]:1073741824/d; distinct:path",
			Rule{Kind: User, Windows: []Window{{Limit: 10, Period: time.Minute}, {Limit: 200, Period: 24 * time.Hour}}}},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			t.Parallel()
			g, err := Parse(tt.in)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(g.Rules[0], tt.rule) {
				t.Errorf("rule %#v, want %#v", g.Rules[0], tt.rule)
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
	loc, err := ruletime.LoadZone(g.Calendar)
	if err != nil || loc.String() != "Asia/Shanghai" {
		t.Fatalf("Zone: %v, %v", loc, err)
	}
	if !g.hasCalendar() {
		t.Error("hasCalendar false")
	}
	var none Group
	if loc, err := ruletime.LoadZone(none.Calendar); err != nil || loc != time.UTC {
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
		{"ip:5/calendar day; calendar:Mars/Olympus", 28, errInvalid, `unknown time zone "Mars/Olympus"`},
		{"ip:5/calendar day; calendar:Local", 28, errInvalid, "local zone"},
		{"ip:5/calendar fortnight", 14, errSyntax, `unknown calendar unit "fortnight"`},
		{"ip:5/calendar", 13, errSyntax, "expected day, week or month"},
		{"ip:5/calendar day~1h", 17, errInvalid, "takes no grain"},
		{"ip:5 concurrent/calendar day", 15, errInvalid, "no calendar period"},
		{"ip:5/calendar day,6/calendar day", 18, errInvalid, "duplicate calendar day"},
		{"ip:5/calendar day; calendar:UTC; calendar:UTC", 33, errInvalid, "duplicate calendar statement"},
		{"ip:5/min; distinct:path; distinct:ua", 25, errInvalid, "duplicate distinct statement"},
		{"ip:5/min; distinct:a/b", 19, errInvalid, `invalid distinct name "a/b"`},
		{"ip:5/min; distinct:", 19, errSyntax, "expected path or a key function"},
		{"ip:5/min,100/d~1h; distinct:path", 9, errInvalid, "counts distinct values"},
		{"ip[bytes]:5/min,100/d~1h; ip:3/calendar day; distinct:path", 29, errInvalid, "counts distinct values"},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			t.Parallel()
			_, err := Parse(tt.in)
			var e *Error
			if !errors.As(err, &e) {
				t.Fatalf("err %v, want *Error", err)
			}
			if e.Offset != tt.off || kindOf(err) != tt.cat || !strings.Contains(e.Reason, tt.reason) {
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
		{Window{Limit: 1, Calendar: ruletime.Day, Concurrent: true}, "no calendar period"},
		{Window{Limit: 1, Calendar: ruletime.Day, Period: time.Hour}, "has no period"},
		{Window{Limit: 1, Calendar: ruletime.Day, Grain: time.Hour}, "takes no grain"},
	}
	for _, tt := range tests {
		g := Group{Rules: []Rule{{Kind: IP, Windows: []Window{tt.w}}}}
		if err := g.Validate(); err == nil || !strings.Contains(err.Error(), tt.reason) {
			t.Errorf("%+v: %v, want %q", tt.w, err, tt.reason)
		}
	}
}
