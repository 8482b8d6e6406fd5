package admin_test

import (
	"context"
	"encoding/json"
	"net/http"
	"testing"

	"github.com/slidelimit/slidelimit/internal/admin"
)

// learnedFake is a Source with learned blocks.
type learnedFake struct {
	fake
	blocks []admin.LearnedBlock
}

func (f *learnedFake) LearnedBlocks(context.Context) ([]admin.LearnedBlock, error) {
	return f.blocks, nil
}

func (f *learnedFake) LiftLearned(context.Context, string, string, string) (bool, error) {
	return false, nil
}

// TestLearnedBlocks: learned blocks are listed one row per rule and
// subject, masked, the longest of a subject that several lanes have, a
// global subject only for a block of no other.
func TestLearnedBlocks(t *testing.T) {
	t.Parallel()
	fp := admin.Fingerprint
	m1, m2, g := fp("key:m1"), fp("key:m2"), fp("global")
	f := &learnedFake{blocks: []admin.LearnedBlock{
		{Throttle: "llm", Left: 30, Subjects: []admin.LearnedSubject{{"global", g}, {"key(apikey)", fp("key:k1")}, {"key(model)", m1}}},
		{Throttle: "llm", Left: 50, Subjects: []admin.LearnedSubject{{"global", g}, {"key(apikey)", fp("key:k1")}, {"key(model)", m2}}},
		{Throttle: "plain", Left: 10, Subjects: []admin.LearnedSubject{{"global", g}}},
	}}
	w := serve(admin.New(f, admin.Config{}, "ops"), http.MethodGet, "/api/blocks")
	var ans admin.BlocksAnswer
	if err := json.Unmarshal(w.Body.Bytes(), &ans); w.Code != http.StatusOK || err != nil {
		t.Fatalf("GET /api/blocks: %d %s", w.Code, w.Body)
	}
	want := []admin.Block{
		{Scope: "llm", Rule: "key(apikey)", Subject: fp("key:k1"), Masked: true, Ref: fp("key:k1"), Left: 50, Learned: true},
		{Scope: "llm", Rule: "key(model)", Subject: m2, Masked: true, Ref: m2, Left: 50, Learned: true},
		{Scope: "llm", Rule: "key(model)", Subject: m1, Masked: true, Ref: m1, Left: 30, Learned: true},
		{Scope: "plain", Rule: "global", Left: 10, Learned: true},
	}
	if len(ans.Blocks) != len(want) {
		t.Fatalf("GET /api/blocks = %+v, want %+v", ans.Blocks, want)
	}
	for i := range want {
		if ans.Blocks[i] != want[i] {
			t.Errorf("block %d = %+v, want %+v", i, ans.Blocks[i], want[i])
		}
	}
}
