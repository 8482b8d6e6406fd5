// Package openaiusage reads the token usage the OpenAI API reports in a
// response body, to settle a slidelimit Throttle's calls to it:
//
//	llm, err := lim.Throttle("openai", "key(apikey):500/min; key(apikey)[tokens]:90000/min")
//	client := openai.NewClient(option.WithHTTPClient(&http.Client{Transport: llm.Transport(nil,
//		slidelimit.WithCall(estimate),
//		slidelimit.WithActualBody(openaiusage.Tokens))}))
//
// Tokens reads a JSON response (chat completions, completions, embeddings,
// responses) and a server-sent-events stream whose last events carry usage:
// chat completions with stream_options {"include_usage": true}, and the
// response.completed event of the Responses API.
package openaiusage

import (
	"bytes"
	"encoding/json"
	"net/http"
)

// Tokens returns the usage a response of the OpenAI API reports in body,
// by cost name: "tokens" (total_tokens), "input_tokens" (prompt_tokens or
// input_tokens) and "output_tokens" (completion_tokens or output_tokens),
// for a throttle's [tokens], [input_tokens] or [output_tokens] rules;
// the names a throttle does not have are ignored. Of a stream it takes the
// last event that carries usage. It returns nil when body holds no usage
// (an error, a stream closed before its end), so that the call keeps its
// estimate. Its signature is slidelimit.WithActualBody's.
func Tokens(_ *http.Response, body []byte) map[string]int64 {
	u, ok := find(body)
	if !ok {
		return nil
	}
	return u.costs()
}

// usage is the usage object of the OpenAI API's responses and events.
type usage struct {
	PromptTokens     *int64 `json:"prompt_tokens"`
	CompletionTokens *int64 `json:"completion_tokens"`
	InputTokens      *int64 `json:"input_tokens"`
	OutputTokens     *int64 `json:"output_tokens"`
	TotalTokens      *int64 `json:"total_tokens"`
}

// envelope holds the usage of a response or an event: at its top, or in
// the response of a Responses API event.
type envelope struct {
	Usage    *usage `json:"usage"`
	Response *struct {
		Usage *usage `json:"usage"`
	} `json:"response"`
}

var (
	usageKey   = []byte(`"usage":`)
	dataPrefix = []byte("data:")
)

// find returns the usage in body: a JSON response's, else the last of a
// stream's data events, else the last usage object in what is left of a
// JSON response longer than its kept tail.
func find(body []byte) (usage, bool) {
	if !bytes.Contains(body, usageKey) {
		return usage{}, false
	}
	if u, ok := parse(body); ok {
		return u, true
	}
	var last usage
	found := false
	for line := range bytes.Lines(body) {
		data, ok := bytes.CutPrefix(line, dataPrefix)
		// An event's line is whole when it ends with its newline; the
		// first line of a kept tail may be the end of a longer one.
		if !ok || !bytes.HasSuffix(data, []byte("\n")) || !bytes.Contains(data, usageKey) {
			continue
		}
		if u, ok := parse(data); ok {
			last, found = u, true
		}
	}
	if found {
		return last, true
	}
	i := bytes.LastIndex(body, usageKey)
	var u usage
	if json.NewDecoder(bytes.NewReader(body[i+len(usageKey):])).Decode(&u) == nil && u.valid() {
		return u, true
	}
	return usage{}, false
}

// parse returns the usage of one JSON response or event.
func parse(data []byte) (usage, bool) {
	var e envelope
	if json.Unmarshal(data, &e) != nil {
		return usage{}, false
	}
	if e.Usage != nil && e.Usage.valid() {
		return *e.Usage, true
	}
	if e.Response != nil && e.Response.Usage != nil && e.Response.Usage.valid() {
		return *e.Response.Usage, true
	}
	return usage{}, false
}

// valid reports usage with a total, or the counts that make it.
func (u *usage) valid() bool {
	return u.TotalTokens != nil || u.input() != nil && u.output() != nil
}

func (u *usage) input() *int64 {
	if u.PromptTokens != nil {
		return u.PromptTokens
	}
	return u.InputTokens
}

func (u *usage) output() *int64 {
	if u.CompletionTokens != nil {
		return u.CompletionTokens
	}
	return u.OutputTokens
}

// costs returns u by cost name. Without an output count (embeddings),
// the output is what the total holds beyond the input.
func (u *usage) costs() map[string]int64 {
	m := make(map[string]int64, 3)
	in, out := u.input(), u.output()
	switch {
	case u.TotalTokens != nil:
		m["tokens"] = *u.TotalTokens
	case in != nil && out != nil:
		m["tokens"] = *in + *out
	}
	if in != nil {
		m["input_tokens"] = *in
		if out == nil && u.TotalTokens != nil {
			m["output_tokens"] = max(*u.TotalTokens-*in, 0)
		}
	}
	if out != nil {
		m["output_tokens"] = *out
	}
	return m
}
