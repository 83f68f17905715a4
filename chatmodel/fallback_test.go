package chatmodel_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/salvagehq/salvage"
	"github.com/salvagehq/salvage/chatmodel"
	"github.com/salvagehq/salvage/salvagetest"
)

// TestModelFallbackChain: a premium model answering 429 with a long
// Retry-After passes each call on to a cheaper model at another endpoint
// at once; the journal records both attempts, the second with the model
// that answered, and no chunk waits out the rate limit.
func TestModelFallbackChain(t *testing.T) {
	t.Parallel()
	var premiumAsked atomic.Int32
	premium := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		premiumAsked.Add(1)
		w.Header().Set("Retry-After", "60")
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusTooManyRequests)
		_, _ = io.WriteString(w, `{"error":{"message":"slow down","type":"rate_limit_exceeded"}}`)
	}))
	defer premium.Close()
	cheap := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"id":"c","object":"chat.completion","created":1,"model":"cheap-model",
			"choices":[{"index":0,"message":{"role":"assistant","content":"3"},"finish_reason":"stop"}],
			"usage":{"prompt_tokens":12,"completion_tokens":1,"total_tokens":13}}`)
	}))
	defer cheap.Close()
	tools := make([]salvage.Tool, 0, 2)
	for _, m := range []struct{ name, url, model, system string }{
		{"premium", premium.URL + "/v1", "premium-model", "premium-api"}, {"cheap", cheap.URL + "/v1", "cheap-model", "cheap-api"},
	} {
		tool, err := chatmodel.New(m.name, chatmodel.Config{BaseURL: m.url, Model: m.model, APIKey: "k", System: m.system})
		if err != nil {
			t.Fatal(err)
		}
		tools = append(tools, tool)
	}
	p := &salvage.Pipeline{
		Name:  "rated",
		Split: salvage.SplitItems,
		Tools: tools,
		Stages: []salvage.Stage{{Name: "rate", Agents: []salvage.Agent{{Name: "rater", Run: func(ctx context.Context, t *salvage.Turn) (any, error) {
			out, who, err := t.ToolWithFallback(ctx, []string{"premium", "cheap"}, salvage.ChatRequest{Messages: []salvage.Message{{Role: "user", Content: string(t.Input)}}})
			if err != nil {
				return nil, err
			}
			var resp salvage.ChatResponse
			_ = json.Unmarshal(out, &resp)
			return map[string]string{"by": who, "answer": resp.Content}, nil
		}}}}},
	}
	c := salvagetest.StartServer(t).Client(t, &salvage.Config{Pipelines: []*salvage.Pipeline{p}})
	ctx := context.Background()
	id, err := c.JobSubmit(ctx, "rated", []string{"one", "two", "three"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if j := salvagetest.WaitJob(t, c, id, 2*time.Minute); j.Status != salvage.JobDone {
		t.Fatalf("job %+v", j)
	}
	// Once per chunk: a chain that waited out the Retry-After would ask
	// again. (That it does not wait at all is recovery's
	// TestFallbackChainPassesRateLimitsAndOpenBreakers, on a fake clock.)
	if premiumAsked.Load() != 3 {
		t.Fatalf("premium asked %d times; want once per chunk", premiumAsked.Load())
	}
	tr, err := c.JobTrace(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	for _, ch := range tr.Chunks {
		if len(ch.Calls) != 2 {
			t.Fatalf("chunk %d: %d calls; want the premium attempt and the cheap answer", ch.Chunk, len(ch.Calls))
		}
		p, a := ch.Calls[0], ch.Calls[1]
		if p.Tool != "premium" || p.Status != salvage.CallFailed || a.Tool != "cheap" || a.Status != salvage.CallSucceeded || a.Usage == nil || a.Usage.Model != "cheap-model" {
			t.Fatalf("chunk %d calls: %+v / %+v", ch.Chunk, p, a)
		}
	}
}
