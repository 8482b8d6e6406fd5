package lifecycle

import (
	"errors"
	"strings"
	"testing"

	"github.com/slidelimit/slidelimit/rules"
)

// TestSharesRefused: a route's group with a share(CLASS):P% statement
// fails NewRules with a *rules.Error at the statement, in the group's
// canonical text.
func TestSharesRefused(t *testing.T) {
	t.Parallel()
	g := rules.MustParse("share(critical):30%; ip:5/s")
	_, errs := NewRules(&Transport{}, g, nil, nil, nil)
	var re *rules.Error
	if err := errors.Join(errs...); !errors.As(err, &re) || re.Offset != strings.Index(re.Input, "share(critical)") ||
		!strings.Contains(re.Reason, "Limiter.Throttle") {
		t.Errorf("NewRules = %v, want a *rules.Error at the share", err)
	}
	if _, errs := NewRules(&Transport{}, rules.MustParse("ip:5/s"), nil, nil, nil); len(errs) != 0 {
		t.Errorf("NewRules without shares = %v", errs)
	}
}
