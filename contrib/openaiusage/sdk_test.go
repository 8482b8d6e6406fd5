package openaiusage_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/responses"
	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"

	"github.com/slidelimit/slidelimit"
	"github.com/slidelimit/slidelimit/contrib/openaiusage"
)

// fakeOpenAI answers POST /v1/chat/completions as the OpenAI API does: a
// completion of 57 tokens, or, streamed, chunks then one with usage of 91
// tokens when stream_options.include_usage is set, then [DONE].
func fakeOpenAI(t *testing.T, includeUsage *atomic.Bool) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost && r.URL.Path == "/v1/responses" {
			fakeResponses(w, r)
			return
		}
		if r.Method != http.MethodPost || r.URL.Path != "/v1/chat/completions" {
			http.Error(w, `{"error":{"message":"not found"}}`, http.StatusNotFound)
			return
		}
		var req struct {
			Stream        bool `json:"stream"`
			StreamOptions struct {
				IncludeUsage bool `json:"include_usage"`
			} `json:"stream_options"`
		}
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		if !req.Stream {
			w.Header().Set("Content-Type", "application/json")
			io.WriteString(w, `{"id":"chatcmpl-1","object":"chat.completion","created":1765000000,"model":"gpt-4o-mini",`+
				`"choices":[{"index":0,"message":{"role":"assistant","content":"Hello!"},"logprobs":null,"finish_reason":"stop"}],`+
				`"usage":{"prompt_tokens":45,"completion_tokens":12,"total_tokens":57,`+
				`"prompt_tokens_details":{"cached_tokens":0},"completion_tokens_details":{"reasoning_tokens":0}}}`)
			return
		}
		includeUsage.Store(req.StreamOptions.IncludeUsage)
		w.Header().Set("Content-Type", "text/event-stream")
		const head = `{"id":"chatcmpl-2","object":"chat.completion.chunk","created":1765000000,"model":"gpt-4o-mini",`
		for i := range 30 {
			fmt.Fprintf(w, "data: %s\"choices\":[{\"index\":0,\"delta\":{\"content\":\"w%d \"},\"finish_reason\":null}],\"usage\":null}\n\n", head, i)
			w.(http.Flusher).Flush()
		}
		fmt.Fprintf(w, "data: %s\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}],\"usage\":null}\n\n", head)
		if req.StreamOptions.IncludeUsage {
			fmt.Fprintf(w, "data: %s\"choices\":[],\"usage\":{\"prompt_tokens\":40,\"completion_tokens\":51,\"total_tokens\":91}}\n\n", head)
		}
		io.WriteString(w, "data: [DONE]\n\n")
	}))
	t.Cleanup(srv.Close)
	return srv
}

// fakeResponses answers POST /v1/responses as the OpenAI API does: a
// response of 100 tokens, or, streamed, events ending with
// response.completed, whose response has usage of 33 tokens.
func fakeResponses(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Stream bool `json:"stream"`
	}
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	const output = `"output":[{"type":"message","id":"msg_1","status":"completed","role":"assistant",` +
		`"content":[{"type":"output_text","text":"Hello!","annotations":[]}]}]`
	if !req.Stream {
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"id":"resp_1","object":"response","created_at":1765000000,"status":"completed","model":"gpt-4o-mini",`+output+
			`,"usage":{"input_tokens":30,"input_tokens_details":{"cached_tokens":0},"output_tokens":70,`+
			`"output_tokens_details":{"reasoning_tokens":0},"total_tokens":100}}`)
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	event := func(typ, data string) {
		fmt.Fprintf(w, "event: %s\ndata: {\"type\":%q,%s}\n\n", typ, typ, data)
		w.(http.Flusher).Flush()
	}
	event("response.created", `"sequence_number":0,"response":{"id":"resp_2","object":"response","status":"in_progress","model":"gpt-4o-mini","output":[],"usage":null}`)
	for i := range 10 {
		event("response.output_text.delta", fmt.Sprintf(`"sequence_number":%d,"item_id":"msg_1","output_index":0,"content_index":0,"delta":"w%d "`, i+1, i))
	}
	event("response.completed", `"sequence_number":11,"response":{"id":"resp_2","object":"response","status":"completed","model":"gpt-4o-mini",`+output+
		`,"usage":{"input_tokens":20,"output_tokens":13,"total_tokens":33}}`)
}

// TestOpenAISDK: the official OpenAI Go SDK's calls through a Throttle's
// Transport are settled to the usage in their JSON body, and in the last
// chunk or event of a stream, for chat completions and responses: the
// window holds the tokens used, not the estimates.
func TestOpenAISDK(t *testing.T) {
	var includeUsage atomic.Bool
	srv := fakeOpenAI(t, &includeUsage)
	mr := miniredis.RunT(t)
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr(), ContextTimeoutEnabled: true,
		MaintNotificationsConfig: &maintnotifications.Config{Mode: maintnotifications.ModeDisabled}})
	t.Cleanup(func() { rdb.Close() })
	lim, err := slidelimit.New(rdb)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lim.Close() })
	llm, err := lim.Throttle("openai", "key(apikey):500/min; key(apikey)[tokens]:90000/min")
	if err != nil {
		t.Fatal(err)
	}
	const estimate = 4000
	hc := &http.Client{Transport: llm.Transport(nil,
		slidelimit.WithCall(func(r *http.Request) (slidelimit.Call, error) {
			key := "unknown"
			if strings.HasSuffix(r.Header.Get("Authorization"), "sk-team-a") {
				key = "team-a"
			}
			return slidelimit.Call{Keys: map[string]string{"apikey": key}, Costs: map[string]int64{"tokens": estimate}}, nil
		}),
		slidelimit.WithActualBody(openaiusage.Tokens),
	)}
	client := openai.NewClient(
		option.WithBaseURL(srv.URL+"/v1/"),
		option.WithAPIKey("sk-team-a"),
		option.WithHTTPClient(hc),
		option.WithMaxRetries(0),
	)
	ctx := context.Background()
	params := openai.ChatCompletionNewParams{
		Model:               openai.ChatModelGPT4oMini,
		Messages:            []openai.ChatCompletionMessageParamUnion{openai.UserMessage("Say hello")},
		MaxCompletionTokens: openai.Int(estimate - 100),
	}
	used := func(want int64) {
		t.Helper()
		deadline := time.Now().Add(5 * time.Second)
		for {
			d, err := lim.Peek(ctx, "openai", "key(apikey)[tokens]", "team-a", false)
			if err != nil {
				t.Fatal(err)
			}
			w := d.Windows[0]
			if w.Used == want && w.Remaining == 90000-want {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("the token window holds %d (%d remaining), want %d", w.Used, w.Remaining, want)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}

	cc, err := client.Chat.Completions.New(ctx, params)
	if err != nil {
		t.Fatal(err)
	}
	if cc.Usage.TotalTokens != 57 || cc.Choices[0].Message.Content != "Hello!" {
		t.Fatalf("the SDK read %d tokens, %q", cc.Usage.TotalTokens, cc.Choices[0].Message.Content)
	}
	used(57)

	params.StreamOptions = openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)}
	stream := client.Chat.Completions.NewStreaming(ctx, params)
	var acc openai.ChatCompletionAccumulator
	for stream.Next() {
		acc.AddChunk(stream.Current())
	}
	if err := stream.Err(); err != nil {
		t.Fatal(err)
	}
	if !includeUsage.Load() {
		t.Fatal("the SDK did not ask for usage in the stream")
	}
	if acc.Usage.TotalTokens != 91 || !strings.HasPrefix(acc.Choices[0].Message.Content, "w0 w1 ") {
		t.Fatalf("the SDK read %d tokens, %q", acc.Usage.TotalTokens, acc.Choices[0].Message.Content)
	}
	// The SDK closes the body at [DONE]; Close again is the caller's habit.
	stream.Close()
	used(57 + 91)

	// The Responses API: usage in the response, and in a stream's
	// response.completed event (the stream ends with the body, no [DONE]).
	rparams := responses.ResponseNewParams{
		Model:           openai.ChatModelGPT4oMini,
		Input:           responses.ResponseNewParamsInputUnion{OfString: openai.String("Say hello")},
		MaxOutputTokens: openai.Int(estimate - 100),
	}
	res, err := client.Responses.New(ctx, rparams)
	if err != nil {
		t.Fatal(err)
	}
	if res.Usage.TotalTokens != 100 || res.OutputText() != "Hello!" {
		t.Fatalf("the SDK read %d tokens, %q", res.Usage.TotalTokens, res.OutputText())
	}
	used(57 + 91 + 100)
	rstream := client.Responses.NewStreaming(ctx, rparams)
	var last responses.ResponseStreamEventUnion
	for rstream.Next() {
		last = rstream.Current()
	}
	if err := rstream.Err(); err != nil {
		t.Fatal(err)
	}
	if last.Type != "response.completed" || last.Response.Usage.TotalTokens != 33 {
		t.Fatalf("the SDK's last event: %s with %d tokens", last.Type, last.Response.Usage.TotalTokens)
	}
	used(57 + 91 + 100 + 33)
}
