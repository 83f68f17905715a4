package recovery

import (
	"context"
	"encoding/json"
	"time"

	"github.com/salvagehq/salvage/salvagetype"
)

// limiter paces the requests to what every process of a deployment
// shares a rate limit on (issue 36): a model provider, an external
// system, one tool. Turn asks it before each request a call makes (every
// attempt, every verification) and tells it how the request went.
type limiter interface {
	// Acquire waits until a request of tool may be sent, or ctx ends;
	// tokens is what the request is estimated to spend (0 for a request
	// that is not a model's). It returns done, to be called once with
	// what the request spent and its error: a rate limit holds every
	// process's requests to the key for the wait it names. When maxWait
	// is above 0 and the wait for budget would pass it, Acquire returns
	// at once an error of class ClassRateLimited naming the wait (a
	// fallback chain then takes its next link). waited is how long the
	// request waited for budget: zero when it had budget at once, or no
	// declared limit counts it (the time taken to find that out is not a
	// wait for a limit, and a journal row must not say it waited).
	Acquire(ctx context.Context, tool *salvagetype.Tool, tokens int64, maxWait time.Duration) (done func(spent Spent, err error), waited time.Duration, err error)
}

// Spent is what one request spent, as its answer says.
type Spent struct {
	// Tokens is the usage it reported (0 keeps the estimate).
	Tokens int64
	// Wait is how long its rate-limit headers say the budget is spent
	// (ToolResult.Wait).
	Wait time.Duration
}

// estimateTokens is what a call's input will spend at a model before it
// is sent, as providers count it against a tokens-per-minute limit: about
// four characters a token of its messages, plus the completion it asks
// for (max_tokens, at least 1). An input that is not a chat request
// counts four characters a token of its JSON.
func estimateTokens(in json.RawMessage) int64 {
	var req struct {
		Messages []struct {
			Content string `json:"content"`
		} `json:"messages"`
		MaxTokens int64 `json:"max_tokens"`
	}
	if json.Unmarshal(in, &req) != nil || len(req.Messages) == 0 {
		return int64(len(in)+3) / 4
	}
	var chars int
	for _, m := range req.Messages {
		chars += len(m.Content)
	}
	return int64(chars+3)/4 + max(req.MaxTokens, 1)
}

// spentBy is what a tool result says its call spent.
func spentBy(res salvagetype.ToolResult) Spent {
	s := Spent{Wait: res.Wait}
	if res.Usage != nil {
		s.Tokens = res.Usage.PromptTokens + res.Usage.CompletionTokens
	}
	return s
}
