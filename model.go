package salvage

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
)

// ChatTimeoutDefault bounds one attempt of a model call.
const ChatTimeoutDefault = 60 * time.Second

// ErrContextLength is wrapped by the error of a model call whose prompt is
// longer than the model takes: permanent, since retrying cannot shorten it.
var ErrContextLength = errors.New("salvage: the prompt exceeds the model's context length")

// ChatAPI is the wire format a ChatModel speaks.
type ChatAPI string

// Chat APIs.
const (
	// ChatAPIOpenAI is the OpenAI chat completions API (POST
	// <BaseURL>/chat/completions), which OpenAI, vLLM, Ollama, llama.cpp's
	// server, LiteLLM and most gateways speak.
	ChatAPIOpenAI ChatAPI = "openai"
	// ChatAPIAnthropic is Anthropic's Messages API (POST
	// <BaseURL>/messages, BaseURL https://api.anthropic.com/v1).
	ChatAPIAnthropic ChatAPI = "anthropic"
)

// AnthropicMaxTokensDefault is the completion bound sent to the Messages
// API, which requires one, when a ChatRequest sets none.
const AnthropicMaxTokensDefault = 1024

// ChatModelConfig configures ChatModel.
type ChatModelConfig struct {
	// API is the wire format. Default ChatAPIOpenAI.
	API ChatAPI
	// BaseURL is the base of an OpenAI-compatible API, such as
	// https://api.openai.com/v1 or http://127.0.0.1:11434/v1 (Ollama).
	// Required.
	BaseURL string
	// Model names the model. Required.
	Model string
	// APIKey authenticates (a bearer token; x-api-key for Anthropic); it
	// is never logged, journaled or put in an envelope or event. Default
	// $OPENAI_API_KEY, or $ANTHROPIC_API_KEY for ChatAPIAnthropic; a local
	// server may need none.
	APIKey string
	// Timeout bounds one attempt. A timed-out attempt is retried by tier 1
	// like a 5xx: a model call has no side effect. Default
	// ChatTimeoutDefault.
	Timeout time.Duration
	// HTTPClient makes the requests. Default one of its own.
	HTTPClient *http.Client
	// System names the tool's circuit breaker (Tool.System). Default
	// "model-" and BaseURL's host name, dots as "_" (model-api_openai_com):
	// models behind one endpoint share a breaker, another provider in a
	// fallback chain has its own.
	System string
}

// ChatRequest is a model call's input: what an agent passes to Turn.Tool.
type ChatRequest struct {
	// Messages are the conversation; Role is system, user or assistant.
	Messages []Message `json:"messages"`
	// MaxTokens bounds the completion; 0 leaves it to the server.
	MaxTokens int64 `json:"max_tokens,omitempty"`
	// Temperature; nil leaves it to the server.
	Temperature *float64 `json:"temperature,omitempty"`
}

// ChatResponse is a model call's output, recorded in the journal and
// replayed on a resume: a resumed chunk never pays for a completion twice.
type ChatResponse struct {
	Content      string `json:"content"`
	FinishReason string `json:"finish_reason,omitempty"`
	Usage        Usage  `json:"usage"`
}

// ChatModel returns a tool named name that calls a model through the
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
func ChatModel(name string, cfg ChatModelConfig) (Tool, error) {
	switch {
	case name == "":
		return Tool{}, fmt.Errorf("%w: ChatModel needs a tool name", ErrInvalidConfig)
	case cfg.BaseURL == "":
		return Tool{}, fmt.Errorf("%w: ChatModelConfig.BaseURL is required", ErrInvalidConfig)
	case cfg.Model == "":
		return Tool{}, fmt.Errorf("%w: ChatModelConfig.Model is required", ErrInvalidConfig)
	}
	switch cfg.API {
	case "", ChatAPIOpenAI:
		cfg.API = ChatAPIOpenAI
		if cfg.APIKey == "" {
			cfg.APIKey = os.Getenv("OPENAI_API_KEY")
		}
	case ChatAPIAnthropic:
		if cfg.APIKey == "" {
			cfg.APIKey = os.Getenv("ANTHROPIC_API_KEY")
		}
	default:
		return Tool{}, fmt.Errorf("%w: ChatModelConfig.API %q: want %q or %q", ErrInvalidConfig, cfg.API, ChatAPIOpenAI, ChatAPIAnthropic)
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = ChatTimeoutDefault
	}
	if cfg.HTTPClient == nil {
		cfg.HTTPClient = &http.Client{}
	}
	if cfg.System == "" {
		host := cfg.BaseURL
		if u, err := url.Parse(cfg.BaseURL); err == nil && u.Hostname() != "" {
			host = u.Hostname()
		}
		cfg.System = "model-" + subjectSystem(host)
		if len(cfg.System) > 128 {
			cfg.System = cfg.System[:128] // a system name is at most 128 bytes
		}
	}
	if cfg.API == ChatAPIAnthropic {
		m := messagesModel{cfg: cfg}
		return Tool{Name: name, System: cfg.System, Call: m.call}, nil
	}
	opts := []option.RequestOption{
		option.WithBaseURL(cfg.BaseURL), option.WithMaxRetries(0), option.WithHTTPClient(cfg.HTTPClient),
	}
	if cfg.APIKey != "" {
		opts = append(opts, option.WithAPIKey(cfg.APIKey))
	}
	client := openai.NewClient(opts...)
	m := chatModel{client: client, cfg: cfg}
	return Tool{Name: name, System: cfg.System, Call: m.call}, nil
}

type chatModel struct {
	client openai.Client
	cfg    ChatModelConfig
}

func (m chatModel) call(ctx context.Context, c ToolCall) (ToolResult, error) {
	var req ChatRequest
	if err := json.Unmarshal(c.Input, &req); err != nil {
		return ToolResult{}, Permanent(400, fmt.Errorf("model input: %w", err))
	}
	if len(req.Messages) == 0 {
		return ToolResult{}, Permanent(400, errors.New("model input: no messages"))
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
			return ToolResult{}, Permanent(400, fmt.Errorf("model input: role %q: want system, user or assistant", msg.Role))
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
	resp, err := m.client.Chat.Completions.New(attempt, params, option.WithHeader("Idempotency-Key", c.IdempotencyKey))
	if err != nil {
		return ToolResult{}, classifyChat(ctx, attempt, m.cfg.Timeout, err)
	}
	if len(resp.Choices) == 0 {
		return ToolResult{}, Transient(0, errors.New("model answered with no choices"))
	}
	model := resp.Model
	if model == "" {
		model = m.cfg.Model
	}
	out := ChatResponse{
		Content: resp.Choices[0].Message.Content, FinishReason: string(resp.Choices[0].FinishReason),
		Usage: Usage{Model: model, PromptTokens: resp.Usage.PromptTokens, CompletionTokens: resp.Usage.CompletionTokens},
	}
	data, err := json.Marshal(out)
	if err != nil {
		return ToolResult{}, err
	}
	return ToolResult{Output: data, Usage: &out.Usage}, nil
}

// classifyChat turns a failed attempt into a typed error. The caller's
// own cancellation is returned as is: Salvage stopped the call.
func classifyChat(ctx, attempt context.Context, timeout time.Duration, err error) error {
	if ctx.Err() != nil {
		return ctx.Err()
	}
	if attempt.Err() != nil {
		return Timeout(fmt.Errorf("model did not answer within %s: %w", timeout, err))
	}
	var apiErr *openai.Error
	if !errors.As(err, &apiErr) {
		// No status: the connection failed or the answer did not parse.
		return Transient(0, fmt.Errorf("model: %w", err))
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
		if after, ok := retryAfter(header, time.Now()); ok && status == 529 {
			return Overloaded(after, cause)
		} else if ok {
			return RateLimited(after, cause)
		}
		return Transient(status, cause)
	case status == http.StatusRequestTimeout || status == http.StatusConflict || status >= 500:
		return Transient(status, cause)
	case contextLength:
		return Permanent(status, fmt.Errorf("%w: %w", ErrContextLength, cause))
	default:
		return Permanent(status, cause)
	}
}

// detail is the API's own code and message, cut short; never the request.
func detail(e *openai.Error) string {
	var parts []string
	if e.Code != "" {
		parts = append(parts, e.Code)
	}
	if e.Message != "" {
		msg := e.Message
		if len(msg) > 300 {
			msg = msg[:300] + "…"
		}
		parts = append(parts, msg)
	}
	if len(parts) == 0 {
		return ""
	}
	return ": " + strings.Join(parts, ": ")
}

// retryAfter reads how long a server asked to wait: retry-after-ms, else
// Retry-After in seconds or as an HTTP date.
func retryAfter(h http.Header, now time.Time) (time.Duration, bool) {
	if h == nil {
		return 0, false
	}
	if ms, err := strconv.ParseFloat(h.Get("Retry-After-Ms"), 64); err == nil && ms >= 0 {
		return time.Duration(ms * float64(time.Millisecond)), true
	}
	v := strings.TrimSpace(h.Get("Retry-After"))
	if v == "" {
		return 0, false
	}
	if s, err := strconv.ParseFloat(v, 64); err == nil && s >= 0 {
		return time.Duration(s * float64(time.Second)), true
	}
	if t, err := http.ParseTime(v); err == nil {
		return max(t.Sub(now), 0), true
	}
	return 0, false
}
