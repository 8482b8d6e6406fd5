package slidelimit_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log"
	"net/http"
	"net/http/httptest"
	"strings"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/slidelimit/slidelimit"
)

// gateway forwards its tenants' completions to an LLM provider, under the
// provider's limits for each of its API keys: interactive calls (a person
// waits) have 70% of every window while batch calls wait too, tenants
// take turns within a class, and each call goes out with whichever key
// has room first.
type gateway struct {
	llm     *slidelimit.Throttle
	keys    []string          // the keys' ids: the key(apikey) values
	secrets map[string]string // the keys themselves, by id
	url     string
	client  *http.Client // a plain client: the throttle admitted the call already
}

// gatewayRules are the provider's limits per key, as it states them, and
// the classes' shares.
const gatewayRules = "key(apikey):500/min; key(apikey)[tokens]:90000/min; share(interactive):70%; share(batch):30%"

// complete sends prompt for tenant in class ("interactive" or "batch"),
// estimating the call at maxTokens tokens, and settles it to the usage the
// provider reports.
func (g *gateway) complete(ctx context.Context, tenant, class, prompt string, maxTokens int64) (string, error) {
	calls := make([]slidelimit.Call, len(g.keys))
	for i, k := range g.keys {
		calls[i] = slidelimit.Call{Keys: map[string]string{"apikey": k}, Costs: map[string]int64{"tokens": maxTokens},
			Class: class, Tenant: tenant}
	}
	p, i, err := g.llm.WaitAny(ctx, calls...)
	if err != nil {
		return "", err // ctx ended (nothing was counted), or a call can never fit
	}
	body, _ := json.Marshal(map[string]any{"prompt": prompt, "max_tokens": maxTokens})
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, g.url, strings.NewReader(string(body)))
	if err != nil {
		p.Finish(nil)
		return "", err
	}
	req.Header.Set("Authorization", "Bearer "+g.secrets[g.keys[i]])
	resp, err := g.client.Do(req)
	if err != nil {
		p.Finish(nil) // the estimate stays counted: the provider may have seen the call
		return "", err
	}
	p.Learn(resp) // a 429's Retry-After blocks the key in every process: WaitAny skips it
	defer resp.Body.Close()
	var out struct {
		Text  string `json:"text"`
		Usage struct {
			TotalTokens int64 `json:"total_tokens"`
		} `json:"usage"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil || resp.StatusCode != http.StatusOK {
		p.Finish(nil)
		return "", errors.Join(fmt.Errorf("provider: %s", resp.Status), err)
	}
	p.Finish(map[string]int64{"tokens": out.Usage.TotalTokens}) // the unused estimate goes back at once
	return out.Text, nil
}

func ExampleThrottle_WaitAny_gateway() {
	mr, err := miniredis.Run() // an in-process Redis for the example; use your own
	if err != nil {
		log.Fatal(err)
	}
	defer mr.Close()
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	defer rdb.Close()

	// A fake provider that answers every completion with 42 tokens used.
	provider := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var in struct{ Prompt string }
		json.NewDecoder(r.Body).Decode(&in)
		fmt.Fprintf(w, `{"text":%q,"usage":{"total_tokens":42}}`, "re: "+in.Prompt)
	}))
	defer provider.Close()

	lim, err := slidelimit.New(rdb)
	if err != nil {
		log.Fatal(err)
	}
	defer lim.Close()
	llm, err := lim.Throttle("llm", gatewayRules)
	if err != nil {
		log.Fatal(err)
	}
	g := &gateway{llm: llm, keys: []string{"k1", "k2", "k3"}, url: provider.URL, client: provider.Client(),
		secrets: map[string]string{"k1": "sk-1", "k2": "sk-2", "k3": "sk-3"}}

	ctx := context.Background()
	for _, c := range []struct{ tenant, class, prompt string }{
		{"acme", "interactive", "hello"},
		{"globex", "batch", "summarize"},
		{"acme", "batch", "translate"},
		{"initech", "interactive", "hi"},
	} {
		text, err := g.complete(ctx, c.tenant, c.class, c.prompt, 2000)
		if err != nil {
			log.Fatal(err)
		}
		fmt.Println(c.tenant, c.class+":", text)
	}
	for _, c := range llm.Stats().Classes {
		fmt.Printf("class %s: %d admitted, %d waiting\n", c.Class, c.Admitted, c.Waiting)
	}
	// Output:
	// acme interactive: re: hello
	// globex batch: re: summarize
	// acme batch: re: translate
	// initech interactive: re: hi
	// class interactive: 2 admitted, 0 waiting
	// class batch: 2 admitted, 0 waiting
}
