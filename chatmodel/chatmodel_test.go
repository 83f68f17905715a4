package chatmodel_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/salvagehq/salvage"
	"github.com/salvagehq/salvage/chatmodel"
)

const testKey = "sk-test-SECRET-never-shown"

// TestChatModelClassifiesEveryErrorShape: a real HTTP server answers with
// each error shape an OpenAI-compatible API sends; the tool's error says
// how to retry by type and status, never by text, and never carries the
// key.
func TestChatModelClassifiesEveryErrorShape(t *testing.T) {
	t.Parallel()
	date := time.Now().Add(3 * time.Second).UTC().Format(http.TimeFormat)
	type answer struct {
		status int
		header map[string]string
		body   string
		sleep  time.Duration
	}
	apiError := func(typ, code, msg string) string {
		b, _ := json.Marshal(map[string]any{"error": map[string]any{"message": msg, "type": typ, "param": nil, "code": code}})
		return string(b)
	}
	for _, tt := range []struct {
		name       string
		answer     answer
		is         error
		status     int
		retryAfter time.Duration // exact, or at least for the HTTP date
		orLater    bool
	}{
		{"429 retry-after seconds", answer{status: 429, header: map[string]string{"Retry-After": "2"}, body: apiError("requests", "rate_limit_exceeded", "Rate limit reached")}, salvage.ErrRateLimited, 429, 2 * time.Second, false},
		{"429 retry-after date", answer{status: 429, header: map[string]string{"Retry-After": date}, body: apiError("requests", "rate_limit_exceeded", "Rate limit reached")}, salvage.ErrRateLimited, 429, time.Second, true},
		{"429 retry-after-ms", answer{status: 429, header: map[string]string{"Retry-After-Ms": "250", "Retry-After": "1"}, body: apiError("tokens", "rate_limit_exceeded", "slow down")}, salvage.ErrRateLimited, 429, 250 * time.Millisecond, false},
		{"429 without a wait", answer{status: 429, body: apiError("requests", "rate_limit_exceeded", "Rate limit reached")}, salvage.ErrTransient, 429, 0, false},
		{"529 overloaded", answer{status: 529, header: map[string]string{"Retry-After": "1"}, body: `{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}`}, salvage.ErrRateLimited, 529, time.Second, false},
		{"500", answer{status: 500, body: apiError("server_error", "", "The server had an error")}, salvage.ErrTransient, 500, 0, false},
		{"503", answer{status: 503, body: "upstream connect error"}, salvage.ErrTransient, 503, 0, false},
		{"timeout", answer{status: 200, sleep: time.Minute}, salvage.ErrTimeout, 0, 0, false},
		{"400 context length", answer{status: 400, body: apiError("invalid_request_error", "context_length_exceeded", "This model's maximum context length is 8192 tokens. However, your messages resulted in 9001 tokens.")}, chatmodel.ErrContextLength, 400, 0, false},
		{"400", answer{status: 400, body: apiError("invalid_request_error", "", "Invalid value for 'temperature'")}, salvage.ErrPermanent, 400, 0, false},
		{"401", answer{status: 401, body: apiError("invalid_request_error", "invalid_api_key", "Incorrect API key provided: sk-test-****shown")}, salvage.ErrPermanent, 401, 0, false},
		{"403", answer{status: 403, body: apiError("invalid_request_error", "unsupported_country_region_territory", "Country not supported")}, salvage.ErrPermanent, 403, 0, false},
		{"404", answer{status: 404, body: apiError("invalid_request_error", "model_not_found", "The model does not exist")}, salvage.ErrPermanent, 404, 0, false},
		{"422", answer{status: 422, body: `{"detail":[{"msg":"field required"}]}`}, salvage.ErrPermanent, 422, 0, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var requests atomic.Int32
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				requests.Add(1)
				// Read to the end: only then does the server notice a client
				// that gave up (r.Context ends), which ends the hang.
				_, _ = io.Copy(io.Discard, r.Body)
				if tt.answer.sleep > 0 {
					select {
					case <-time.After(tt.answer.sleep):
					case <-r.Context().Done():
						return
					}
				}
				for k, v := range tt.answer.header {
					w.Header().Set(k, v)
				}
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(tt.answer.status)
				_, _ = io.WriteString(w, tt.answer.body)
			}))
			defer srv.Close()
			_, err := callModel(t, srv.URL, clientTimeout(tt.answer.sleep))
			if !errors.Is(err, tt.is) {
				t.Fatalf("error %v; want it to match %v", err, tt.is)
			}
			if tt.is == chatmodel.ErrContextLength && !errors.Is(err, salvage.ErrPermanent) {
				t.Errorf("a context-length error must be permanent: %v", err)
			}
			var ce *salvage.CallError
			if !errors.As(err, &ce) {
				t.Fatalf("error %T is not a CallError", err)
			}
			if ce.Status != tt.status {
				t.Errorf("status %d, want %d", ce.Status, tt.status)
			}
			if tt.orLater && (ce.RetryAfter < tt.retryAfter || ce.RetryAfter > 4*time.Second) || !tt.orLater && ce.RetryAfter != tt.retryAfter {
				t.Errorf("retry after %s, want %s", ce.RetryAfter, tt.retryAfter)
			}
			if strings.Contains(err.Error(), "SECRET") {
				t.Errorf("the error carries the API key: %v", err)
			}
			if n := requests.Load(); n != 1 {
				t.Errorf("%d requests: the SDK retried; tier 1 is Salvage's", n)
			}
		})
	}

	t.Run("connection refused", func(t *testing.T) {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		url := "http://" + l.Addr().String() + "/v1"
		_ = l.Close()
		if _, err := callModel(t, url, time.Second); !errors.Is(err, salvage.ErrTransient) {
			t.Errorf("error %v; want transient", err)
		}
	})
}

// TestChatModelAnswers: a completion's content and usage come back, the
// key goes as a bearer token and the idempotency key as Idempotency-Key.
func TestChatModelAnswers(t *testing.T) {
	t.Parallel()
	var got *http.Request
	var body map[string]any
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got = r.Clone(context.Background())
		_ = json.NewDecoder(r.Body).Decode(&body)
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"id":"chatcmpl-1","object":"chat.completion","created":1,"model":"test-model-0613",
			"choices":[{"index":0,"message":{"role":"assistant","content":"7"},"finish_reason":"stop"}],
			"usage":{"prompt_tokens":42,"completion_tokens":3,"total_tokens":45}}`)
	}))
	defer srv.Close()
	res, err := callModel(t, srv.URL+"/v1", time.Second)
	if err != nil {
		t.Fatal(err)
	}
	var out salvage.ChatResponse
	if err := json.Unmarshal(res.Output, &out); err != nil {
		t.Fatal(err)
	}
	if out.Content != "7" || out.FinishReason != "stop" || out.Usage != (salvage.Usage{Model: "test-model-0613", PromptTokens: 42, CompletionTokens: 3}) {
		t.Errorf("response = %+v", out)
	}
	if res.Usage == nil || *res.Usage != out.Usage {
		t.Errorf("ToolResult.Usage = %+v, want the response's usage for the journal", res.Usage)
	}
	if got.URL.Path != "/v1/chat/completions" || got.Header.Get("Authorization") != "Bearer "+testKey || got.Header.Get("Idempotency-Key") != "idem-1" {
		t.Errorf("request %s, authorization %q, idempotency key %q", got.URL.Path, got.Header.Get("Authorization"), got.Header.Get("Idempotency-Key"))
	}
	if body["model"] != "test-model" || body["max_tokens"] != float64(5) {
		t.Errorf("request body = %v", body)
	}
	if n := got.Header.Get("X-Stainless-Retry-Count"); n != "" && n != "0" {
		t.Errorf("the SDK retried (retry count %s): tier 1 is Salvage's", n)
	}
}

// clientTimeout is how long a call waits for a server that answers after
// sleep: a server that hangs (sleep, a minute, holds the request until the
// client gives up) is given up on after 2 s; any other is waited for as
// long as a loaded machine could need.
func clientTimeout(sleep time.Duration) time.Duration {
	if sleep > 0 {
		return 2 * time.Second
	}
	return time.Minute
}

func callModel(t *testing.T, url string, timeout time.Duration) (salvage.ToolResult, error) {
	t.Helper()
	tool, err := chatmodel.New("model", chatmodel.Config{BaseURL: url, Model: "test-model", APIKey: testKey, Timeout: timeout})
	if err != nil {
		t.Fatal(err)
	}
	in, _ := json.Marshal(salvage.ChatRequest{Messages: []salvage.Message{{Role: "user", Content: "Rate this clause 0-10."}}, MaxTokens: 5})
	return tool.Call(context.Background(), salvage.ToolCall{Input: in, IdempotencyKey: "idem-1"})
}

// TestAnthropicMessagesClassifiesEveryErrorShape: the same for Anthropic's
// Messages API, whose errors are {"type": "error", "error": {"type",
// "message"}}.
func TestAnthropicMessagesClassifiesEveryErrorShape(t *testing.T) {
	t.Parallel()
	anthropicError := func(typ, msg string) string {
		b, _ := json.Marshal(map[string]any{"type": "error", "error": map[string]string{"type": typ, "message": msg}})
		return string(b)
	}
	for _, tt := range []struct {
		name       string
		status     int
		header     map[string]string
		body       string
		sleep      time.Duration
		is         error
		retryAfter time.Duration
	}{
		{"429 retry-after", 429, map[string]string{"Retry-After": "3"}, anthropicError("rate_limit_error", "Number of request tokens has exceeded your per-minute rate limit"), 0, salvage.ErrRateLimited, 3 * time.Second},
		{"529 overloaded", 529, map[string]string{"Retry-After": "1"}, anthropicError("overloaded_error", "Overloaded"), 0, salvage.ErrRateLimited, time.Second},
		{"529 without a wait", 529, nil, anthropicError("overloaded_error", "Overloaded"), 0, salvage.ErrTransient, 0},
		{"500", 500, nil, anthropicError("api_error", "Internal server error"), 0, salvage.ErrTransient, 0},
		{"timeout", 200, nil, "", time.Minute, salvage.ErrTimeout, 0},
		{"400 prompt too long", 400, nil, anthropicError("invalid_request_error", "prompt is too long: 210000 tokens > 200000 maximum"), 0, salvage.ErrPermanent, 0},
		{"401", 401, nil, anthropicError("authentication_error", "invalid x-api-key"), 0, salvage.ErrPermanent, 0},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var requests atomic.Int32
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				requests.Add(1)
				// Read to the end: only then does the server notice a client
				// that gave up (r.Context ends), which ends the hang.
				_, _ = io.Copy(io.Discard, r.Body)
				if tt.sleep > 0 {
					select {
					case <-time.After(tt.sleep):
					case <-r.Context().Done():
						return
					}
				}
				for k, v := range tt.header {
					w.Header().Set(k, v)
				}
				w.WriteHeader(tt.status)
				_, _ = io.WriteString(w, tt.body)
			}))
			defer srv.Close()
			_, err := callAnthropic(t, srv.URL+"/v1", clientTimeout(tt.sleep))
			var ce *salvage.CallError
			if !errors.Is(err, tt.is) || !errors.As(err, &ce) {
				t.Fatalf("error %v; want a CallError matching %v", err, tt.is)
			}
			if ce.RetryAfter != tt.retryAfter || (tt.status != 200 && ce.Status != tt.status) {
				t.Errorf("status %d retry after %s; want %d and %s", ce.Status, ce.RetryAfter, tt.status, tt.retryAfter)
			}
			if errors.Is(err, chatmodel.ErrContextLength) {
				t.Errorf("the Messages API names no error code for context length; a 400 is plainly permanent: %v", err)
			}
			if strings.Contains(err.Error(), "SECRET") || requests.Load() != 1 {
				t.Errorf("error %q after %d requests", err, requests.Load())
			}
		})
	}
}

// TestAnthropicMessagesAnswers: content blocks become the content, usage
// is input and output tokens, the key goes as x-api-key and system
// messages as the system prompt.
func TestAnthropicMessagesAnswers(t *testing.T) {
	t.Parallel()
	var got *http.Request
	var body map[string]any
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got = r.Clone(context.Background())
		_ = json.NewDecoder(r.Body).Decode(&body)
		_, _ = io.WriteString(w, `{"id":"msg_1","type":"message","role":"assistant","model":"claude-test-1",
			"content":[{"type":"text","text":"8"}],"stop_reason":"end_turn","usage":{"input_tokens":30,"output_tokens":2}}`)
	}))
	defer srv.Close()
	res, err := callAnthropic(t, srv.URL+"/v1", time.Second)
	if err != nil {
		t.Fatal(err)
	}
	var out salvage.ChatResponse
	_ = json.Unmarshal(res.Output, &out)
	if out.Content != "8" || out.FinishReason != "end_turn" || out.Usage != (salvage.Usage{Model: "claude-test-1", PromptTokens: 30, CompletionTokens: 2}) || res.Usage == nil {
		t.Errorf("response = %+v, usage %+v", out, res.Usage)
	}
	if got.URL.Path != "/v1/messages" || got.Header.Get("x-api-key") != testKey || got.Header.Get("anthropic-version") == "" || got.Header.Get("Idempotency-Key") != "idem-1" {
		t.Errorf("request %s headers %v", got.URL.Path, got.Header)
	}
	if body["system"] != "Be brief." || body["max_tokens"] != float64(5) || len(body["messages"].([]any)) != 1 {
		t.Errorf("request body = %v", body)
	}
}

func callAnthropic(t *testing.T, url string, timeout time.Duration) (salvage.ToolResult, error) {
	t.Helper()
	tool, err := chatmodel.New("model", chatmodel.Config{API: chatmodel.Anthropic, BaseURL: url, Model: "claude-test", APIKey: testKey, Timeout: timeout})
	if err != nil {
		t.Fatal(err)
	}
	in, _ := json.Marshal(salvage.ChatRequest{Messages: []salvage.Message{{Role: "system", Content: "Be brief."}, {Role: "user", Content: "Rate this clause 0-10."}}, MaxTokens: 5})
	return tool.Call(context.Background(), salvage.ToolCall{Input: in, IdempotencyKey: "idem-1"})
}
