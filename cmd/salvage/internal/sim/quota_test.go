package sim_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	"github.com/salvagehq/salvage"
	"github.com/salvagehq/salvage/chatmodel"
	"github.com/salvagehq/salvage/cmd/salvage/internal/sim"
	"github.com/salvagehq/salvage/cmd/salvage/internal/simmodel"
)

// quotaSim serves a sim whose model has quota q.
func quotaSim(t *testing.T, q sim.Quota) (*httptest.Server, *sim.Client) {
	t.Helper()
	m, err := simmodel.New(simmodel.Config{Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(sim.Handler(sim.NewState(sim.Config{Quotas: map[string]sim.Quota{simmodel.ModelName: q}}), m))
	t.Cleanup(srv.Close)
	return srv, &sim.Client{BaseURL: srv.URL, Timeout: 5 * time.Second}
}

// TestQuotaRefusesPastRequestsPerMinute: a model allowed five requests a
// minute admits five, counting down the remaining-requests header, then
// answers 429 with a Retry-After the real client reads as a rate limit
// with its wait; the sim counts both.
func TestQuotaRefusesPastRequestsPerMinute(t *testing.T) {
	for _, api := range []chatmodel.API{chatmodel.OpenAI, chatmodel.Anthropic} {
		t.Run(string(api), func(t *testing.T) {
			srv, client := quotaSim(t, sim.Quota{RPM: 5})
			remaining := sim.HeaderRemainingRequests
			if api == chatmodel.Anthropic {
				remaining = sim.HeaderAnthropicRequestsRemaining
			}
			for i := range 5 {
				resp := post(t, srv.URL, api, "clause "+strconv.Itoa(i))
				if resp.StatusCode != 200 || resp.Header.Get(remaining) != strconv.Itoa(4-i) {
					t.Fatalf("request %d: %d, %s %q; want 200 with %d left", i, resp.StatusCode, remaining, resp.Header.Get(remaining), 4-i)
				}
			}
			tool, err := chatmodel.New("model", chatmodel.Config{API: api, BaseURL: srv.URL + "/v1", Model: simmodel.ModelName, APIKey: "k"})
			if err != nil {
				t.Fatal(err)
			}
			_, err = chat(tool, "k6", "one clause too many")
			var ce *salvage.CallError
			if !errors.Is(err, salvage.ErrRateLimited) || !errors.As(err, &ce) || ce.RetryAfter <= 0 || ce.RetryAfter > time.Minute {
				t.Fatalf("the sixth request: %v; want a rate limit asking to wait at most a minute", err)
			}
			use, err := client.Quota(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			u := use[simmodel.ModelName]
			if sent, _ := u.MaxMinute(); u.Admitted != 5 || u.Refused != 1 || sent != 6 || u.Tokens <= 0 {
				t.Errorf("quota use %+v (most sent in a minute %d); want 5 admitted with their tokens, 1 refused, 6 sent", u, sent)
			}
		})
	}
}

// TestQuotaRefusesPastTokensPerMinute: a request whose tokens would pass
// what is left of the minute's is refused with a wait; one larger than a
// whole minute's is refused for good (400), which no wait can help.
func TestQuotaRefusesPastTokensPerMinute(t *testing.T) {
	// A short prompt and one completion token: 12 tokens each.
	srv, _ := quotaSim(t, sim.Quota{TPM: 30})
	for i := range 2 {
		if resp := post(t, srv.URL, chatmodel.OpenAI, "short "+strconv.Itoa(i)); resp.StatusCode != 200 {
			t.Fatalf("request %d: %d; want 200", i, resp.StatusCode)
		}
	}
	resp := post(t, srv.URL, chatmodel.OpenAI, "short 3")
	if resp.StatusCode != 429 || resp.Header.Get("Retry-After") == "" || resp.Header.Get(sim.HeaderRemainingTokens) == "" {
		t.Fatalf("the third request: %d, headers %v; want 429 with Retry-After and the tokens left", resp.StatusCode, resp.Header)
	}
	big := string(bytes.Repeat([]byte("word "), 100))
	if resp := post(t, srv.URL, chatmodel.OpenAI, big); resp.StatusCode != 400 {
		t.Fatalf("a request larger than the minute's tokens: %d; want 400", resp.StatusCode)
	}
}

// TestQuotaUseMaxMinute: the most sent in any 60 seconds slides over the
// seconds counted.
func TestQuotaUseMaxMinute(t *testing.T) {
	u := sim.QuotaUse{PerSecond: []sim.QuotaSecond{
		{Unix: 100, Admitted: 5, Tokens: 50}, {Unix: 130, Admitted: 3, Refused: 2, Tokens: 30},
		{Unix: 160, Admitted: 4, Tokens: 40}, {Unix: 161, Admitted: 1, Tokens: 10},
	}}
	if req, tok := u.MaxMinute(); req != 10 || tok != 80 {
		t.Errorf("MaxMinute = %d requests, %d tokens; want 10 (seconds 130-161), 80 (seconds 100-130 or 130-161)", req, tok)
	}
}

// post sends one chat request in api's shape, straight over HTTP.
func post(t *testing.T, base string, api chatmodel.API, prompt string) *http.Response {
	t.Helper()
	path, body := "/v1/chat/completions", map[string]any{"model": simmodel.ModelName, "messages": []map[string]string{{"role": "user", "content": prompt}}}
	if api == chatmodel.Anthropic {
		path, body["max_tokens"] = "/v1/messages", 1
	}
	data, _ := json.Marshal(body)
	resp, err := http.Post(base+path, "application/json", bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp
}

// TestQuotaHeadersSayTheBudgetIsSpent: the answer that uses the minute's
// last request says so in its rate-limit headers, and the real client
// reads them as a wait (ToolResult.Wait) before any 429: none while some
// is left, the minute's rest once none is.
func TestQuotaHeadersSayTheBudgetIsSpent(t *testing.T) {
	for _, api := range []chatmodel.API{chatmodel.OpenAI, chatmodel.Anthropic} {
		t.Run(string(api), func(t *testing.T) {
			srv, _ := quotaSim(t, sim.Quota{RPM: 2})
			tool, err := chatmodel.New("model", chatmodel.Config{API: api, BaseURL: srv.URL + "/v1", Model: simmodel.ModelName, APIKey: "k"})
			if err != nil {
				t.Fatal(err)
			}
			first, err := chat(tool, "k1", "first clause")
			if err != nil || first.Wait != 0 {
				t.Fatalf("the first of two: wait %s, %v; want none (one request left)", first.Wait, err)
			}
			last, err := chat(tool, "k2", "second clause")
			if err != nil || last.Wait <= 58*time.Second || last.Wait > time.Minute {
				t.Fatalf("the minute's last request: wait %s, %v; want the rest of the minute", last.Wait, err)
			}
		})
	}
}
