// Package simmodel is the simulated language model the demo pipelines call:
// a latency distribution and injected failures (429 with Retry-After, 5xx,
// timeouts, permanent 400), deterministic for a given seed.
package simmodel

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/salvagehq/salvage"
)

// Config sets the model's behaviour. The zero value answers at once and
// never fails.
type Config struct {
	// Seed makes every draw reproducible.
	Seed int64
	// Latency is the median call latency; 0 answers at once.
	Latency time.Duration
	// Spread is the log-normal sigma of the latency (0.5 if zero).
	Spread float64
	// FailureRate is the chance a call fails transiently: 40% of those are
	// 429s with Retry-After, 40% 5xx, 20% timeouts.
	FailureRate float64
	// PermanentRate is the chance a call fails with a permanent 400.
	PermanentRate float64
	// TimeoutAfter is how long a timed-out call hangs before it fails
	// (4x Latency, at least 5ms, if zero).
	TimeoutAfter time.Duration
}

// Validate names a setting out of range.
func (c Config) Validate() error {
	switch {
	case c.Latency < 0:
		return errors.New("simmodel: Latency must not be negative")
	case c.FailureRate < 0 || c.FailureRate > 1:
		return fmt.Errorf("simmodel: FailureRate %v is not in [0,1]", c.FailureRate)
	case c.PermanentRate < 0 || c.PermanentRate > 1:
		return fmt.Errorf("simmodel: PermanentRate %v is not in [0,1]", c.PermanentRate)
	case c.FailureRate+c.PermanentRate > 1:
		return errors.New("simmodel: FailureRate + PermanentRate exceed 1")
	}
	return nil
}

// Request is one model call. Key identifies the call site (stable across
// retries: job, chunk, agent, per-agent sequence); Prompt decides the
// answer.
type Request struct {
	Key    string
	Prompt string
}

// Response is the model's answer.
type Response struct {
	// Score is a draw in [0, 10] fixed by the seed and the prompt.
	Score int
	// Tokens is a plausible token count for budget accounting.
	Tokens int
}

// maxKeys bounds the per-call-site attempt counters.
const maxKeys = 1 << 17

// Model is safe for concurrent use.
type Model struct {
	cfg      Config
	mu       sync.Mutex
	attempts map[string]int
}

// New returns a model; it fails on a setting out of range.
func New(cfg Config) (*Model, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Spread == 0 {
		cfg.Spread = 0.5
	}
	if cfg.TimeoutAfter == 0 {
		cfg.TimeoutAfter = max(4*cfg.Latency, 5*time.Millisecond)
	}
	return &Model{cfg: cfg, attempts: map[string]int{}}, nil
}

// Config returns the model's settings.
func (m *Model) Config() Config { return m.cfg }

// Complete answers req after a simulated latency, or fails the way the
// configured rates say. The n-th call with one Key draws the n-th outcome
// for that key, so retries of one call site see fresh draws while a whole
// run stays reproducible. It returns a *salvage.CallError on failure and
// ctx's error when cancelled.
func (m *Model) Complete(ctx context.Context, req Request) (Response, error) {
	n := m.attempt(req.Key)

	u := m.uniform("fail", req.Key, n)
	lat := m.latency(req.Key, n)
	switch {
	case u < m.cfg.PermanentRate:
		return Response{}, salvage.Permanent(400, errors.New("model rejected the request"))
	case u < m.cfg.PermanentRate+m.cfg.FailureRate:
		kind := (u - m.cfg.PermanentRate) / m.cfg.FailureRate
		switch {
		case kind < 0.4:
			after := time.Duration(50+m.uniform("retry-after", req.Key, n)*200) * time.Millisecond
			if err := sleep(ctx, lat/4); err != nil {
				return Response{}, err
			}
			return Response{}, salvage.RateLimited(after, errors.New("model rate limit"))
		case kind < 0.8:
			if err := sleep(ctx, lat/2); err != nil {
				return Response{}, err
			}
			// The 5xx a model API sends: unavailable, overloaded (529,
			// with a Retry-After), internal error.
			switch k := (kind - 0.4) / 0.4; {
			case k < 0.5:
				return Response{}, salvage.Transient(503, errors.New("model unavailable"))
			case k < 0.75:
				return Response{}, salvage.Overloaded(100*time.Millisecond, errors.New("model overloaded"))
			default:
				return Response{}, salvage.Transient(500, errors.New("model internal error"))
			}
		default:
			if err := sleep(ctx, m.cfg.TimeoutAfter); err != nil {
				return Response{}, err
			}
			return Response{}, salvage.Timeout(errors.New("model did not answer in time"))
		}
	}
	if err := sleep(ctx, lat); err != nil {
		return Response{}, err
	}
	score := int(m.uniform("score", req.Prompt, 0) * 11)
	return Response{Score: min(score, 10), Tokens: PromptTokens(req.Prompt)}, nil
}

// attempt counts a call of key and returns its number. A model that
// never fails and answers at once draws the same for every attempt, so
// it remembers nothing: in a benchmark's worker it would be memory that
// grows with the job and is not Salvage's.
func (m *Model) attempt(key string) int {
	if m.cfg.FailureRate == 0 && m.cfg.PermanentRate == 0 && m.cfg.Latency == 0 {
		return 1
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if len(m.attempts) > maxKeys {
		// Long-running processes forget old call sites; only retries
		// close together need distinct draws.
		clear(m.attempts)
	}
	m.attempts[key]++
	return m.attempts[key]
}

// uniform draws in [0,1) from the seed and the given parts.
func (m *Model) uniform(kind, key string, n int) float64 {
	bp := drawBufs.Get().(*[]byte)
	b := binary.LittleEndian.AppendUint64((*bp)[:0], uint64(m.cfg.Seed))
	b = binary.LittleEndian.AppendUint64(b, uint64(n))
	b = append(append(append(b, kind...), 0), key...)
	sum := sha256.Sum256(b)
	*bp = b
	drawBufs.Put(bp)
	return float64(binary.LittleEndian.Uint64(sum[:8])>>11) / (1 << 53)
}

// drawBufs holds the buffers uniform hashes its parts in: a draw is made
// for every simulated call, keyed by a prompt of a kilobyte or more.
var drawBufs = sync.Pool{New: func() any { return new([]byte) }}

// latency draws a log-normal latency around the median.
func (m *Model) latency(key string, n int) time.Duration {
	if m.cfg.Latency == 0 {
		return 0
	}
	// Box-Muller from two uniform draws.
	u1 := max(m.uniform("lat1", key, n), 1e-12)
	u2 := m.uniform("lat2", key, n)
	z := math.Sqrt(-2*math.Log(u1)) * math.Cos(2*math.Pi*u2)
	return time.Duration(float64(m.cfg.Latency) * math.Exp(m.cfg.Spread*z))
}

func sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// PromptTokens is the simulated prompt's token count: about four
// characters a token, as English text runs.
func PromptTokens(prompt string) int { return 8 + len(prompt)/4 }

// Prompt flattens a chat request's messages into the prompt that decides
// the answer.
func Prompt(req salvage.ChatRequest) string {
	var b strings.Builder
	for _, m := range req.Messages {
		b.WriteString(m.Role)
		b.WriteString(": ")
		b.WriteString(m.Content)
		b.WriteString("\n")
	}
	return b.String()
}

// Tool is the model as an in-process tool speaking ChatRequest and
// ChatResponse, as chatmodel.New does over HTTP: the answer is the
// score as text, with the usage a real API would report. The request is
// not decoded: its bytes are the prompt the answer is drawn from (the same
// request, the same answer) and its length counts the tokens. Decoding
// it is a model provider's work, and done here it was a tenth of the
// worker's CPU in salvage bench's throughput rows, which measure Salvage.
func (m *Model) Tool(name string) salvage.Tool {
	return salvage.Tool{Name: name, System: "model", Call: func(ctx context.Context, c salvage.ToolCall) (salvage.ToolResult, error) {
		if len(c.Input) == 0 || c.Input[0] != '{' {
			return salvage.ToolResult{}, salvage.Permanent(400, errors.New("simmodel: a chat request is a JSON object"))
		}
		r, err := m.Complete(ctx, Request{Key: c.IdempotencyKey, Prompt: string(c.Input)})
		if err != nil {
			return salvage.ToolResult{}, err
		}
		out := chatResponse(r)
		data, err := json.Marshal(out)
		return salvage.ToolResult{Output: data, Usage: &out.Usage}, err
	}}
}

// ModelName is the model the simulation answers as.
const ModelName = "salvage-sim"

// Chat answers a chat request as the simulated model: key identifies the
// call site (the idempotency key).
func (m *Model) Chat(ctx context.Context, key string, req salvage.ChatRequest) (salvage.ChatResponse, error) {
	prompt := Prompt(req)
	r, err := m.Complete(ctx, Request{Key: key, Prompt: prompt})
	if err != nil {
		return salvage.ChatResponse{}, err
	}
	return chatResponse(r), nil
}

// chatResponse is the chat answer carrying r.
func chatResponse(r Response) salvage.ChatResponse {
	return salvage.ChatResponse{Content: strconv.Itoa(r.Score), FinishReason: "stop",
		Usage: salvage.Usage{Model: ModelName, PromptTokens: int64(r.Tokens), CompletionTokens: 1}}
}
