package chatmodel

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/salvagehq/salvage"
)

// anthropicVersion is the Messages API version requested.
const anthropicVersion = "2023-06-01"

// maxModelReply bounds a model API's answer.
const maxModelReply = 4 << 20

// messagesModel calls Anthropic's Messages API. It is a small client of
// its own: the official SDK would bring the AWS, Google Cloud and
// OpenTelemetry modules into every program that imports Salvage, for one
// POST.
type messagesModel struct {
	cfg Config
}

type messagesRequest struct {
	Model       string            `json:"model"`
	MaxTokens   int64             `json:"max_tokens"`
	System      string            `json:"system,omitempty"`
	Messages    []messagesMessage `json:"messages"`
	Temperature *float64          `json:"temperature,omitempty"`
}

type messagesMessage struct {
	Role    string `json:"role"`
	Content string `json:"content"`
}

type messagesResponse struct {
	Model   string `json:"model"`
	Content []struct {
		Type string `json:"type"`
		Text string `json:"text"`
	} `json:"content"`
	StopReason string `json:"stop_reason"`
	Usage      struct {
		InputTokens  int64 `json:"input_tokens"`
		OutputTokens int64 `json:"output_tokens"`
	} `json:"usage"`
}

type messagesError struct {
	Error struct {
		Type    string `json:"type"`
		Message string `json:"message"`
	} `json:"error"`
}

func (m messagesModel) call(ctx context.Context, c salvage.ToolCall) (salvage.ToolResult, error) {
	var req salvage.ChatRequest
	if err := json.Unmarshal(c.Input, &req); err != nil {
		return salvage.ToolResult{}, salvage.Permanent(400, fmt.Errorf("model input: %w", err))
	}
	body := messagesRequest{Model: m.cfg.Model, MaxTokens: req.MaxTokens, Temperature: req.Temperature}
	if body.MaxTokens <= 0 {
		body.MaxTokens = AnthropicMaxTokensDefault
	}
	var system []string
	for _, msg := range req.Messages {
		switch msg.Role {
		case "system":
			system = append(system, msg.Content)
		case "user", "assistant":
			body.Messages = append(body.Messages, messagesMessage{Role: msg.Role, Content: msg.Content})
		default:
			return salvage.ToolResult{}, salvage.Permanent(400, fmt.Errorf("model input: role %q: want system, user or assistant", msg.Role))
		}
	}
	if len(body.Messages) == 0 {
		return salvage.ToolResult{}, salvage.Permanent(400, errors.New("model input: no user or assistant messages"))
	}
	body.System = strings.Join(system, "\n\n")
	data, err := json.Marshal(body)
	if err != nil {
		return salvage.ToolResult{}, salvage.Permanent(400, err)
	}
	attempt, cancel := context.WithTimeout(ctx, m.cfg.Timeout)
	defer cancel()
	hr, err := http.NewRequestWithContext(attempt, http.MethodPost, strings.TrimSuffix(m.cfg.BaseURL, "/")+"/messages", bytes.NewReader(data))
	if err != nil {
		return salvage.ToolResult{}, salvage.Permanent(0, fmt.Errorf("model: %w", err))
	}
	hr.Header.Set("Content-Type", "application/json")
	hr.Header.Set("anthropic-version", anthropicVersion)
	hr.Header.Set("Idempotency-Key", c.IdempotencyKey)
	if m.cfg.APIKey != "" {
		hr.Header.Set("x-api-key", m.cfg.APIKey)
	}
	resp, err := m.cfg.HTTPClient.Do(hr)
	if err != nil {
		return salvage.ToolResult{}, m.failed(ctx, attempt, err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, maxModelReply))
	if err != nil {
		return salvage.ToolResult{}, m.failed(ctx, attempt, err)
	}
	if resp.StatusCode != http.StatusOK {
		var e messagesError
		_ = json.Unmarshal(raw, &e)
		cause := fmt.Errorf("model: %d %s", resp.StatusCode, http.StatusText(resp.StatusCode))
		if e.Error.Type != "" {
			cause = fmt.Errorf("%w: %s: %s", cause, e.Error.Type, clip(e.Error.Message, 300))
		}
		// The Messages API names a prompt past the context window only in
		// its message text, which Salvage does not read: such a 400 is
		// permanent without ErrContextLength.
		return salvage.ToolResult{}, classifyStatus(resp.StatusCode, resp.Header, cause, false)
	}
	var out messagesResponse
	if err := json.Unmarshal(raw, &out); err != nil {
		return salvage.ToolResult{}, salvage.Transient(0, fmt.Errorf("model answer does not parse: %w", err))
	}
	var text strings.Builder
	for _, b := range out.Content {
		if b.Type == "text" {
			text.WriteString(b.Text)
		}
	}
	res := salvage.ChatResponse{Content: text.String(), FinishReason: out.StopReason,
		Usage: salvage.Usage{Model: cmp.Or(out.Model, m.cfg.Model), PromptTokens: out.Usage.InputTokens, CompletionTokens: out.Usage.OutputTokens}}
	data, err = json.Marshal(res)
	if err != nil {
		return salvage.ToolResult{}, err
	}
	return salvage.ToolResult{Output: data, Usage: &res.Usage, Wait: budgetWait(resp.Header, time.Now())}, nil
}

// failed classifies a request that got no answer.
func (m messagesModel) failed(ctx, attempt context.Context, err error) error {
	switch {
	case ctx.Err() != nil:
		return ctx.Err()
	case attempt.Err() != nil:
		return salvage.Timeout(fmt.Errorf("model did not answer within %s", m.cfg.Timeout))
	default:
		return salvage.Transient(0, fmt.Errorf("model: %w", err))
	}
}
