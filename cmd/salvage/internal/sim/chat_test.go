package sim_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http/httptest"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/salvagehq/salvage"
	"github.com/salvagehq/salvage/chatmodel"
	"github.com/salvagehq/salvage/cmd/salvage/internal/sim"
	"github.com/salvagehq/salvage/cmd/salvage/internal/simmodel"
)

// apiTool points the real client for api at a sim whose model has cfg;
// the client gives up on a request after timeout.
func apiTool(t *testing.T, cfg simmodel.Config, api chatmodel.API, timeout time.Duration) salvage.Tool {
	t.Helper()
	m, err := simmodel.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(sim.Handler(sim.NewState(sim.Config{}), m))
	t.Cleanup(srv.Close)
	tool, err := chatmodel.New("model", chatmodel.Config{API: api, BaseURL: srv.URL + "/v1", Model: simmodel.ModelName, Timeout: timeout})
	if err != nil {
		t.Fatal(err)
	}
	return tool
}

func chat(tool salvage.Tool, key, prompt string) (salvage.ToolResult, error) {
	in, _ := json.Marshal(salvage.ChatRequest{Messages: []salvage.Message{{Role: "system", Content: "Answer 0-10."}, {Role: "user", Content: prompt}}})
	return tool.Call(context.Background(), salvage.ToolCall{Input: in, IdempotencyKey: key})
}

// TestChatCompletionsAnswer: the sim's /v1/chat/completions answers the
// real client with a score and usage, the same for the same prompt.
func TestChatCompletionsAnswer(t *testing.T) {
	for _, api := range []chatmodel.API{chatmodel.OpenAI, chatmodel.Anthropic} {
		t.Run(string(api), func(t *testing.T) { answers(t, api) })
	}
}

func answers(t *testing.T, api chatmodel.API) {
	// No call here times out: the bound only ends a test gone wrong.
	tool := apiTool(t, simmodel.Config{Seed: 3}, api, time.Minute)
	a, err := chat(tool, "k1", "The Supplier shall indemnify the Customer.")
	if err != nil {
		t.Fatal(err)
	}
	var out salvage.ChatResponse
	if err := json.Unmarshal(a.Output, &out); err != nil {
		t.Fatal(err)
	}
	if n, err := strconv.Atoi(out.Content); err != nil || n < 0 || n > 10 {
		t.Errorf("content %q is not a score", out.Content)
	}
	if a.Usage == nil || a.Usage.Model != simmodel.ModelName || a.Usage.PromptTokens < 10 || a.Usage.CompletionTokens != 1 {
		t.Errorf("usage = %+v", a.Usage)
	}
	b, err := chat(tool, "k2", "The Supplier shall indemnify the Customer.")
	if err != nil || string(b.Output) != string(a.Output) {
		t.Errorf("the same prompt answered %s then %s (%v)", a.Output, b.Output, err)
	}
}

// TestChatCompletionsFailLikeARealAPI: with every call failing, the sim
// answers each error shape a real API sends, and the real client
// classifies each as specified.
func TestChatCompletionsFailLikeARealAPI(t *testing.T) {
	for _, api := range []chatmodel.API{chatmodel.OpenAI, chatmodel.Anthropic} {
		t.Run(string(api), func(t *testing.T) {
			t.Parallel()
			failLikeARealAPI(t, api)
		})
	}
}

func failLikeARealAPI(t *testing.T, api chatmodel.API) {
	// A simulated timeout holds its request until the client gives up,
	// after failTimeout; every other failure is answered at once. The
	// calls go together, so the test waits about one failTimeout. It is
	// generous: an answer given "at once" to 120 concurrent calls under
	// the race detector on a loaded machine took over 3 s (CI: 107 of 120
	// calls classified timeout, no 529 left), and an answer slower than
	// failTimeout is taken for a timeout.
	const failTimeout = 15 * time.Second
	tool := apiTool(t, simmodel.Config{Seed: 1, FailureRate: 1}, api, failTimeout)
	var mu sync.Mutex
	seen := map[string]int{}
	var wg sync.WaitGroup
	for i := range 120 {
		wg.Go(func() {
			_, err := chat(tool, fmt.Sprintf("key-%d", i), "clause")
			var ce *salvage.CallError
			if !errors.As(err, &ce) {
				t.Errorf("call %d: %v is not a CallError", i, err)
				return
			}
			var class string
			switch {
			case errors.Is(err, salvage.ErrRateLimited) && ce.Status == 429 && ce.RetryAfter > 0:
				class = "429"
			case errors.Is(err, salvage.ErrRateLimited) && ce.Status == 529 && ce.RetryAfter > 0:
				class = "529"
			case errors.Is(err, salvage.ErrTransient) && (ce.Status == 500 || ce.Status == 503):
				class = strconv.Itoa(ce.Status)
			case errors.Is(err, salvage.ErrTimeout):
				class = "timeout"
			default:
				t.Errorf("call %d: unexpected %v (status %d)", i, err, ce.Status)
				return
			}
			mu.Lock()
			seen[class]++
			mu.Unlock()
		})
	}
	wg.Wait()
	for _, want := range []string{"429", "529", "500", "503", "timeout"} {
		if seen[want] == 0 {
			t.Errorf("no %s in 120 failing calls: %v", want, seen)
		}
	}

	perm := apiTool(t, simmodel.Config{PermanentRate: 1}, api, time.Minute)
	if _, err := chat(perm, "k", "clause"); !errors.Is(err, salvage.ErrPermanent) {
		t.Errorf("a rejected prompt: %v, want permanent", err)
	}
}
