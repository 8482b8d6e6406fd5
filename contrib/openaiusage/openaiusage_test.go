package openaiusage_test

import (
	"bytes"
	"maps"
	"strings"
	"testing"

	"github.com/slidelimit/slidelimit/contrib/openaiusage"
)

func TestTokens(t *testing.T) {
	chunk := `data: {"id":"c1","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":"word \"usage\": {}"}}],"usage":null}` + "\n\n"
	long := strings.Repeat(chunk, 40)
	for _, tc := range []struct {
		name, body string
		want       map[string]int64
	}{
		{"chat completion",
			`{"id":"c1","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"hi"},"finish_reason":"stop"}],` +
				`"usage":{"prompt_tokens":45,"completion_tokens":12,"total_tokens":57,"prompt_tokens_details":{"cached_tokens":0}}}`,
			map[string]int64{"tokens": 57, "input_tokens": 45, "output_tokens": 12}},
		{"embeddings",
			`{"object":"list","data":[{"object":"embedding","index":0,"embedding":[0.1]}],"usage":{"prompt_tokens":8,"total_tokens":8}}`,
			map[string]int64{"tokens": 8, "input_tokens": 8, "output_tokens": 0}},
		{"response",
			`{"id":"r1","object":"response","status":"completed","usage":{"input_tokens":30,"output_tokens":70,"total_tokens":100}}`,
			map[string]int64{"tokens": 100, "input_tokens": 30, "output_tokens": 70}},
		{"chat stream with usage last",
			long + `data: {"id":"c1","object":"chat.completion.chunk","choices":[],"usage":{"prompt_tokens":40,"completion_tokens":51,"total_tokens":91}}` + "\n\ndata: [DONE]\n\n",
			map[string]int64{"tokens": 91, "input_tokens": 40, "output_tokens": 51}},
		{"chat stream kept from the middle of a line",
			long[17:] + `data: {"choices":[],"usage":{"prompt_tokens":1,"completion_tokens":2,"total_tokens":3}}` + "\n\ndata: [DONE]\n\n",
			map[string]int64{"tokens": 3, "input_tokens": 1, "output_tokens": 2}},
		{"responses stream",
			"event: response.created\ndata: {\"type\":\"response.created\",\"response\":{\"id\":\"r1\",\"usage\":null}}\n\n" +
				"event: response.output_text.delta\ndata: {\"type\":\"response.output_text.delta\",\"delta\":\"hi\"}\n\n" +
				"event: response.completed\ndata: {\"type\":\"response.completed\",\"response\":{\"id\":\"r1\",\"usage\":{\"input_tokens\":5,\"output_tokens\":6,\"total_tokens\":11}}}\n\n",
			map[string]int64{"tokens": 11, "input_tokens": 5, "output_tokens": 6}},
		{"the tail of a long completion",
			`ng content","finish_reason":"length"}],"usage":{"prompt_tokens":9,"completion_tokens":4000,"total_tokens":4009}}`,
			map[string]int64{"tokens": 4009, "input_tokens": 9, "output_tokens": 4000}},
		{"stream closed before its usage", long, nil},
		{"stream cut in its usage line", long + `data: {"choices":[],"usage":{"prompt_tokens":40,"completion_tokens":51,"total_tokens":9`, nil},
		{"completion cut before its end", `{"choices":[{"message":{"content":"hi"}}],"usage":{"prompt_tokens":45,"completion_tok`, nil},
		{"error", `{"error":{"message":"Rate limit reached","type":"requests","code":"rate_limit_exceeded"}}`, nil},
		{"empty", ``, nil},
	} {
		got := openaiusage.Tokens(nil, []byte(tc.body))
		if !maps.Equal(got, tc.want) {
			t.Errorf("%s: Tokens = %v, want %v", tc.name, got, tc.want)
		}
	}
}

// TestTokensLeavesBody: Tokens does not change the body it reads.
func TestTokensLeavesBody(t *testing.T) {
	body := []byte("data: {\"choices\":[],\"usage\":{\"total_tokens\":3}}\n\ndata: [DONE]\n\n")
	keep := bytes.Clone(body)
	openaiusage.Tokens(nil, body)
	if !bytes.Equal(body, keep) {
		t.Error("Tokens changed the body")
	}
}

// TestTokensCut: a body cut anywhere, at its end (closed early) or at its
// start (a kept tail), gives the whole body's usage or none, never another
// count.
func TestTokensCut(t *testing.T) {
	for _, body := range []string{
		`{"id":"c1","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"usage: 12"}}],` +
			`"usage":{"prompt_tokens":45,"completion_tokens":12,"total_tokens":57,"prompt_tokens_details":{"cached_tokens":0}}}`,
		`data: {"choices":[{"delta":{"content":"\"usage\":{\"total_tokens\":1}"}}],"usage":null}` + "\n\n" +
			`data: {"choices":[],"usage":{"prompt_tokens":40,"completion_tokens":51,"total_tokens":91}}` + "\n\ndata: [DONE]\n\n",
		"event: response.completed\ndata: {\"type\":\"response.completed\",\"response\":{\"usage\":{\"input_tokens\":5,\"output_tokens\":6,\"total_tokens\":11}}}\n\n",
	} {
		whole := openaiusage.Tokens(nil, []byte(body))
		if whole == nil {
			t.Fatalf("no usage in %q", body)
		}
		for i := range len(body) {
			for _, cut := range []string{body[:i], body[i:]} {
				if got := openaiusage.Tokens(nil, []byte(cut)); got != nil && !maps.Equal(got, whole) {
					t.Errorf("Tokens(%q) = %v, want %v or nil", cut, got, whole)
				}
			}
		}
	}
}
