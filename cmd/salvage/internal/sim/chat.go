package sim

import (
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/salvagehq/salvage"
	"github.com/salvagehq/salvage/cmd/salvage/internal/simmodel"
)

// chatHangMax bounds how long a simulated timeout holds its request.
const chatHangMax = 30 * time.Second

// chatRequest is the part of an OpenAI chat completions request the sim
// reads.
type chatRequest struct {
	Model               string        `json:"model"`
	Messages            []wireMessage `json:"messages"`
	MaxTokens           int64         `json:"max_tokens"`
	MaxCompletionTokens int64         `json:"max_completion_tokens"`
}

// wireMessage is one message of either API; content is a string or text
// parts.
type wireMessage struct {
	Role    string          `json:"role"`
	Content json.RawMessage `json:"content"`
}

// modelCall turns a request's messages (after system, if any) into the
// simulated model's request, with the call's idempotency key: the
// Idempotency-Key header, else the body's hash.
func modelCall(r *http.Request, body []byte, system string, msgs []wireMessage) (string, salvage.ChatRequest) {
	req := salvage.ChatRequest{}
	if system != "" {
		req.Messages = append(req.Messages, salvage.Message{Role: "system", Content: system})
	}
	for _, m := range msgs {
		req.Messages = append(req.Messages, salvage.Message{Role: m.Role, Content: contentText(m.Content)})
	}
	key := r.Header.Get(HeaderIdempotencyKey)
	if key == "" {
		sum := sha256.Sum256(body)
		key = hex.EncodeToString(sum[:])
	}
	return key, req
}

// chatSeq numbers completions for their ids.
var chatSeq atomic.Int64

// serveChat answers POST /v1/chat/completions from the simulated model,
// with the error shapes a real API sends: 429 and 529 with Retry-After
// (and retry-after-ms), 500 and 503, a 400 for a rejected prompt, and a
// timeout that holds the request until the caller gives up.
func serveChat(w http.ResponseWriter, r *http.Request, state *State, model *simmodel.Model) {
	body, err := readBody(r)
	if err != nil {
		chatError(w, 400, "invalid_request_error", err.Error())
		return
	}
	var in chatRequest
	if err := json.Unmarshal(body, &in); err != nil || len(in.Messages) == 0 {
		chatError(w, 400, "invalid_request_error", "want {\"model\", \"messages\": [...]}")
		return
	}
	key, req := modelCall(r, body, "", in.Messages)
	name := cmp.Or(in.Model, simmodel.ModelName)
	q := state.quotas.admit(name, estimateTokens(req, max(in.MaxTokens, in.MaxCompletionTokens)))
	q.write(w.Header(), false)
	if q.refusal(w, name, chatError) {
		return
	}
	resp, err := model.Chat(r.Context(), key, req)
	if err != nil {
		chatFailure(w, r, err)
		return
	}
	u := resp.Usage
	state.quotas.settle(q, u.PromptTokens+u.CompletionTokens)
	writeJSON(w, 200, map[string]any{
		"id": "chatcmpl-sim-" + strconv.FormatInt(chatSeq.Add(1), 10), "object": "chat.completion",
		"created": time.Now().Unix(), "model": name,
		"choices": []map[string]any{{"index": 0, "message": map[string]string{"role": "assistant", "content": resp.Content}, "finish_reason": resp.FinishReason}},
		"usage":   map[string]int64{"prompt_tokens": u.PromptTokens, "completion_tokens": u.CompletionTokens, "total_tokens": u.PromptTokens + u.CompletionTokens},
	})
}

// contentText reads a message's content: a string, or text parts.
func contentText(raw json.RawMessage) string {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	var parts []struct {
		Text string `json:"text"`
	}
	_ = json.Unmarshal(raw, &parts)
	var b strings.Builder
	for _, p := range parts {
		b.WriteString(p.Text)
	}
	return b.String()
}

// chatFailure answers the model's failure in the shape of its class, in
// the OpenAI shape.
func chatFailure(w http.ResponseWriter, r *http.Request, err error) {
	modelFailure(w, r, err, chatError)
}

// modelFailure answers the model's failure with writeErr (an API's error
// shape): 429 or 529 with Retry-After, 500 or 503, a 400, or, for a
// timeout, no answer until the caller gives up.
func modelFailure(w http.ResponseWriter, r *http.Request, err error, writeErr func(http.ResponseWriter, int, string, string)) {
	var ce *salvage.CallError
	switch {
	case r.Context().Err() != nil:
		return // the caller is gone
	case !errors.As(err, &ce):
		writeErr(w, 500, "server_error", err.Error())
	case errors.Is(err, salvage.ErrRateLimited):
		w.Header().Set("Retry-After", strconv.Itoa(int((ce.RetryAfter+time.Second-1)/time.Second)))
		w.Header().Set(HeaderRetryAfterMS, strconv.FormatInt(ce.RetryAfter.Milliseconds(), 10))
		if ce.Status == 529 {
			writeErr(w, 529, "overloaded_error", "Overloaded")
			return
		}
		writeErr(w, 429, "rate_limit_exceeded", "Rate limit reached for requests")
	case errors.Is(err, salvage.ErrPermanent):
		writeErr(w, 400, "invalid_request_error", "The model rejected the request")
	case errors.Is(err, salvage.ErrTimeout):
		// No answer: hold the request until the caller gives up.
		sleep(r.Context(), chatHangMax)
		writeErr(w, 504, "timeout", "upstream timed out")
	default:
		writeErr(w, max(ce.Status, 500), "server_error", http.StatusText(max(ce.Status, 500)))
	}
}

// chatError writes an error in the OpenAI shape.
func chatError(w http.ResponseWriter, status int, typ, msg string) {
	code := any(nil)
	if typ == "rate_limit_exceeded" {
		code, typ = typ, "requests"
	}
	writeJSON(w, status, map[string]any{"error": map[string]any{"message": msg, "type": typ, "param": nil, "code": code}})
}

// readBody reads a request body up to maxBody; a longer one is an error.
func readBody(r *http.Request) ([]byte, error) {
	body, err := io.ReadAll(io.LimitReader(r.Body, maxBody+1))
	if err != nil {
		return nil, err
	}
	if len(body) > maxBody {
		return nil, fmt.Errorf("request body over %d bytes", maxBody)
	}
	return body, nil
}

// messagesRequest is the part of an Anthropic Messages request the sim
// reads.
type messagesRequest struct {
	Model     string        `json:"model"`
	System    string        `json:"system"`
	Messages  []wireMessage `json:"messages"`
	MaxTokens int64         `json:"max_tokens"`
}

// serveMessages answers POST /v1/messages as Anthropic's Messages API
// would, from the same simulated model and failures as serveChat.
func serveMessages(w http.ResponseWriter, r *http.Request, state *State, model *simmodel.Model) {
	body, err := readBody(r)
	if err != nil {
		messagesError(w, 400, "invalid_request_error", err.Error())
		return
	}
	var in messagesRequest
	if err := json.Unmarshal(body, &in); err != nil || len(in.Messages) == 0 {
		messagesError(w, 400, "invalid_request_error", "want {\"model\", \"max_tokens\", \"messages\": [...]}")
		return
	}
	key, req := modelCall(r, body, in.System, in.Messages)
	name := cmp.Or(in.Model, simmodel.ModelName)
	q := state.quotas.admit(name, estimateTokens(req, in.MaxTokens))
	q.write(w.Header(), true)
	if q.refusal(w, name, messagesError) {
		return
	}
	resp, err := model.Chat(r.Context(), key, req)
	if err != nil {
		modelFailure(w, r, err, messagesError)
		return
	}
	state.quotas.settle(q, resp.Usage.PromptTokens+resp.Usage.CompletionTokens)
	writeJSON(w, 200, map[string]any{
		"id": "msg_sim_" + strconv.FormatInt(chatSeq.Add(1), 10), "type": "message", "role": "assistant",
		"model": name, "content": []map[string]string{{"type": "text", "text": resp.Content}},
		"stop_reason": "end_turn", "usage": map[string]int64{"input_tokens": resp.Usage.PromptTokens, "output_tokens": resp.Usage.CompletionTokens},
	})
}

// messagesError writes an error in Anthropic's shape.
func messagesError(w http.ResponseWriter, status int, typ, msg string) {
	switch typ {
	case "rate_limit_exceeded":
		typ = "rate_limit_error"
	case "server_error", "timeout":
		typ = "api_error"
	}
	writeJSON(w, status, map[string]any{"type": "error", "error": map[string]string{"type": typ, "message": msg}})
}
