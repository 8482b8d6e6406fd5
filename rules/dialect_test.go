package rules_test

import (
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/slidelimit/slidelimit/rules"
)

// upperWords is a test dialect: no param rules, and count items are
// words, canonically upper case.
var upperWords = rules.Dialect{
	Rule: func(l rules.Rule) error {
		if l.Kind == rules.Param {
			return fmt.Errorf("%s has no path here", l.ID())
		}
		return nil
	},
	CountItem: func(item string) (string, error) {
		if item == "" || item[0] >= '0' && item[0] <= '9' {
			return "", fmt.Errorf("count item %q is not a word", item)
		}
		return strings.ToUpper(item), nil
	},
}

func TestDialectParse(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, in  string
		count     []string
		err       string
		errOffset int
	}{
		{name: "words", in: "ip:5/s; count:Denied,fail", count: []string{"DENIED", "FAIL"}},
		{name: "no count", in: "user:5/s; role(a)=ip:1/s"},
		{name: "param default", in: "ip:5/s; param(id):1/s", err: "param(id) has no path here", errOffset: 8},
		{name: "param in role rules", in: "ip:5/s; role(a)=ip:1/s&param(id):1/s", err: "param(id) has no path here", errOffset: 23},
		{name: "earliest in text", in: "role(a)=param(x):1/s; param(y):1/s", err: "param(x)", errOffset: 8},
		{name: "bad item", in: "ip:5/s; count:fail, 401", err: `count item "401" is not a word`, errOffset: 20},
		{name: "duplicate canonical", in: "ip:5/s; count:fail,FAIL", err: "duplicate FAIL in count (listed as fail before)", errOffset: 19},
		{name: "grammar still applies", in: "ip:0/s; count:x", err: "limit 0 is below 1", errOffset: 3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			g, err := upperWords.Parse(tt.in)
			if tt.err != "" {
				var re *rules.Error
				if !errors.As(err, &re) || re.Syntax || !strings.Contains(re.Reason, tt.err) || re.Offset != tt.errOffset {
					t.Fatalf("Parse(%q) = %v; want an invalid *Error containing %q at offset %d", tt.in, err, tt.err, tt.errOffset)
				}
				return
			}
			if err != nil {
				t.Fatalf("Parse(%q): %v", tt.in, err)
			}
			if !reflect.DeepEqual(g.Count, tt.count) {
				t.Errorf("Count = %q; want %q", g.Count, tt.count)
			}
		})
	}
}

func TestZeroDialectIsParse(t *testing.T) {
	t.Parallel()
	for _, in := range []string{"ip:5/s; param(id):1/min; count:401,5xx", "ip:5/s; count:fail"} {
		g1, err1 := rules.Parse(in)
		g2, err2 := rules.Dialect{}.Parse(in)
		if !reflect.DeepEqual(g1, g2) || fmt.Sprint(err1) != fmt.Sprint(err2) {
			t.Errorf("%q: Parse = %v, %v; Dialect{}.Parse = %v, %v", in, g1, err1, g2, err2)
		}
	}
}
