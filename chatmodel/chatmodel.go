// Package chatmodel calls a model as a Salvage tool, over HTTP: OpenAI's
// chat completions API (OpenAI, vLLM, Ollama, llama.cpp's server, LiteLLM
// and most gateways) or Anthropic's Messages API. Its input is a
// salvage.ChatRequest, its output a salvage.ChatResponse, its failures
// typed for tier 1 by status and headers. It is apart from the root
// package so that a program with no model imports no model SDK.
package chatmodel

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/salvagehq/salvage"
)

// TimeoutDefault bounds one attempt of a model call.
const TimeoutDefault = 60 * time.Second

// ErrContextLength is wrapped by the error of a model call whose prompt is
// longer than the model takes: permanent, since retrying cannot shorten it.
var ErrContextLength = errors.New("chatmodel: the prompt exceeds the model's context length")

// API is the wire format a model tool speaks.
type API string

// Chat APIs.
const (
	// OpenAI is the OpenAI chat completions API (POST
	// <BaseURL>/chat/completions), which OpenAI, vLLM, Ollama, llama.cpp's
	// server, LiteLLM and most gateways speak.
	OpenAI API = "openai"
	// Anthropic is Anthropic's Messages API (POST
	// <BaseURL>/messages, BaseURL https://api.anthropic.com/v1).
	Anthropic API = "anthropic"
)

// AnthropicMaxTokensDefault is the completion bound sent to the Messages
// API, which requires one, when a ChatRequest sets none.
const AnthropicMaxTokensDefault = 1024

// Config configures New.
type Config struct {
	// API is the wire format. Default OpenAI.
	API API
	// BaseURL is the base of an OpenAI-compatible API, such as
	// https://api.openai.com/v1 or http://127.0.0.1:11434/v1 (Ollama).
	// Required.
	BaseURL string
	// Model names the model. Required.
	Model string
	// APIKey authenticates (a bearer token; x-api-key for Anthropic); it
	// is never logged, journaled or put in an envelope or event. Default
	// $OPENAI_API_KEY, or $ANTHROPIC_API_KEY for Anthropic; a local
	// server may need none.
	APIKey string
	// Timeout bounds one attempt. A timed-out attempt is retried by tier 1
	// like a 5xx: a model call has no side effect. Default
	// TimeoutDefault.
	Timeout time.Duration
	// HTTPClient makes the requests. Default one of its own.
	HTTPClient *http.Client
	// System names the tool's circuit breaker (Tool.System). Default
	// "model-" and BaseURL's host name, dots as "_" (model-api_openai_com):
	// models behind one endpoint share a breaker, another provider in a
	// fallback chain has its own.
	System string
}

// New returns a tool named name that calls a model through the
// OpenAI chat completions API, which OpenAI, vLLM, Ollama, llama.cpp's
// server, LiteLLM and most gateways speak. Its input is a ChatRequest,
// its output a ChatResponse; the tokens it spent go in the call's journal
// row (ToolResult.Usage). The SDK's own retries are off: tier 1 is
// Salvage's. Failures are classified from the status code and headers,
// never the message: 429 and 529 are rate limits honouring Retry-After
// (seconds, an HTTP date, or retry-after-ms); 408, 409 and 5xx and
// connection errors are transient; an attempt past Timeout is a timeout;
// 400, 401, 403, 404, 422 and other 4xx are permanent, and a prompt over
// the context length wraps ErrContextLength. The call sends its
// idempotency key as Idempotency-Key.
func New(name string, cfg Config) (salvage.Tool, error) {
	switch {
	case name == "":
		return salvage.Tool{}, fmt.Errorf("%w: chatmodel.New needs a tool name", salvage.ErrInvalidConfig)
	case cfg.BaseURL == "":
		return salvage.Tool{}, fmt.Errorf("%w: Config.BaseURL is required", salvage.ErrInvalidConfig)
	case cfg.Model == "":
		return salvage.Tool{}, fmt.Errorf("%w: Config.Model is required", salvage.ErrInvalidConfig)
	}
	switch cfg.API {
	case "", OpenAI:
		cfg.API = OpenAI
		if cfg.APIKey == "" {
			cfg.APIKey = os.Getenv("OPENAI_API_KEY")
		}
	case Anthropic:
		if cfg.APIKey == "" {
			cfg.APIKey = os.Getenv("ANTHROPIC_API_KEY")
		}
	default:
		return salvage.Tool{}, fmt.Errorf("%w: Config.API %q: want %q or %q", salvage.ErrInvalidConfig, cfg.API, OpenAI, Anthropic)
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = TimeoutDefault
	}
	if cfg.HTTPClient == nil {
		cfg.HTTPClient = &http.Client{}
	}
	if cfg.System == "" {
		host := cfg.BaseURL
		if u, err := url.Parse(cfg.BaseURL); err == nil && u.Hostname() != "" {
			host = u.Hostname()
		}
		cfg.System = salvage.SystemName("model-" + host)
	}
	if cfg.API == Anthropic {
		m := messagesModel{cfg: cfg}
		return salvage.Tool{Name: name, System: cfg.System, Call: m.call}, nil
	}
	opts := []option.RequestOption{
		option.WithBaseURL(cfg.BaseURL), option.WithMaxRetries(0), option.WithHTTPClient(cfg.HTTPClient),
	}
	if cfg.APIKey != "" {
		opts = append(opts, option.WithAPIKey(cfg.APIKey))
	}
	client := openai.NewClient(opts...)
	m := chatModel{client: client, cfg: cfg}
	return salvage.Tool{Name: name, System: cfg.System, Call: m.call}, nil
}

type chatModel struct {
	client openai.Client
	cfg    Config
}

func (m chatModel) call(ctx context.Context, c salvage.ToolCall) (salvage.ToolResult, error) {
	var req salvage.ChatRequest
	if err := json.Unmarshal(c.Input, &req); err != nil {
		return salvage.ToolResult{}, salvage.Permanent(400, fmt.Errorf("model input: %w", err))
	}
	if len(req.Messages) == 0 {
		return salvage.ToolResult{}, salvage.Permanent(400, errors.New("model input: no messages"))
	}
	params := openai.ChatCompletionNewParams{Model: m.cfg.Model}
	for _, msg := range req.Messages {
		switch msg.Role {
		case "system":
			params.Messages = append(params.Messages, openai.SystemMessage(msg.Content))
		case "user":
			params.Messages = append(params.Messages, openai.UserMessage(msg.Content))
		case "assistant":
			params.Messages = append(params.Messages, openai.AssistantMessage(msg.Content))
		default:
			return salvage.ToolResult{}, salvage.Permanent(400, fmt.Errorf("model input: role %q: want system, user or assistant", msg.Role))
		}
	}
	if req.MaxTokens > 0 {
		params.MaxTokens = openai.Int(req.MaxTokens)
	}
	if req.Temperature != nil {
		params.Temperature = openai.Float(*req.Temperature)
	}
	attempt, cancel := context.WithTimeout(ctx, m.cfg.Timeout)
	defer cancel()
	var httpResp *http.Response
	resp, err := m.client.Chat.Completions.New(attempt, params, option.WithHeader("Idempotency-Key", c.IdempotencyKey), option.WithResponseInto(&httpResp))
	if err != nil {
		return salvage.ToolResult{}, classifyChat(ctx, attempt, m.cfg.Timeout, err)
	}
	if len(resp.Choices) == 0 {
		return salvage.ToolResult{}, salvage.Transient(0, errors.New("model answered with no choices"))
	}
	model := resp.Model
	if model == "" {
		model = m.cfg.Model
	}
	out := salvage.ChatResponse{
		Content: resp.Choices[0].Message.Content, FinishReason: string(resp.Choices[0].FinishReason),
		Usage: salvage.Usage{Model: model, PromptTokens: resp.Usage.PromptTokens, CompletionTokens: resp.Usage.CompletionTokens},
	}
	data, err := json.Marshal(out)
	if err != nil {
		return salvage.ToolResult{}, err
	}
	res := salvage.ToolResult{Output: data, Usage: &out.Usage}
	if httpResp != nil {
		res.Wait = budgetWait(httpResp.Header, time.Now())
	}
	return res, nil
}

// classifyChat turns a failed attempt into a typed error. The caller's
// own cancellation is returned as is: Salvage stopped the call.
func classifyChat(ctx, attempt context.Context, timeout time.Duration, err error) error {
	if ctx.Err() != nil {
		return ctx.Err()
	}
	if attempt.Err() != nil {
		return salvage.Timeout(fmt.Errorf("model did not answer within %s: %w", timeout, err))
	}
	var apiErr *openai.Error
	if !errors.As(err, &apiErr) {
		// No status: the connection failed or the answer did not parse.
		return salvage.Transient(0, fmt.Errorf("model: %w", err))
	}
	status := apiErr.StatusCode
	cause := fmt.Errorf("model: %d %s%s", status, http.StatusText(status), detail(apiErr))
	var header http.Header
	if apiErr.Response != nil {
		header = apiErr.Response.Header
	}
	contextLength := apiErr.Code == "context_length_exceeded" || apiErr.Code == "string_above_max_length"
	return classifyStatus(status, header, cause, contextLength)
}

// classifyStatus types a model API's error answer by its status and
// headers: 429 and 529 with a wait are rate limits, without one (and 408,
// 409, 5xx) transient, other 4xx permanent; a context-length error, as
// the API's error code says, wraps ErrContextLength.
func classifyStatus(status int, header http.Header, cause error, contextLength bool) error {
	switch {
	case status == http.StatusTooManyRequests || status == 529:
		if after, ok := salvage.RetryAfter(header, time.Now()); ok && status == 529 {
			return salvage.Overloaded(after, cause)
		} else if ok {
			return salvage.RateLimited(after, cause)
		}
		return salvage.Transient(status, cause)
	case status == http.StatusRequestTimeout || status == http.StatusConflict || status >= 500:
		return salvage.Transient(status, cause)
	case contextLength:
		return salvage.Permanent(status, fmt.Errorf("%w: %w", ErrContextLength, cause))
	default:
		return salvage.Permanent(status, cause)
	}
}

// detail is the API's own code and message, cut short; never the request.
func detail(e *openai.Error) string {
	var parts []string
	if e.Code != "" {
		parts = append(parts, e.Code)
	}
	if e.Message != "" {
		parts = append(parts, clip(e.Message, 300))
	}
	if len(parts) == 0 {
		return ""
	}
	return ": " + strings.Join(parts, ": ")
}

// clip cuts s to n bytes, marking the cut.
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
