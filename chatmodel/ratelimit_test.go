package chatmodel

import (
	"net/http"
	"testing"
	"time"
)

// TestBudgetWait reads both providers' headers: a wait only when nothing
// is left, the longer of requests and tokens, never negative, bounded.
func TestBudgetWait(t *testing.T) {
	now := time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC)
	for _, c := range []struct {
		name string
		h    map[string]string
		want time.Duration
	}{
		{"nothing said", nil, 0},
		{"openai, some left", map[string]string{"x-ratelimit-remaining-requests": "3", "x-ratelimit-reset-requests": "6s"}, 0},
		{"openai, requests spent", map[string]string{"x-ratelimit-remaining-requests": "0", "x-ratelimit-reset-requests": "6m0s"}, 6 * time.Minute},
		{"openai, both spent", map[string]string{"x-ratelimit-remaining-requests": "0", "x-ratelimit-reset-requests": "20ms",
			"x-ratelimit-remaining-tokens": "0", "x-ratelimit-reset-tokens": "1.5s"}, 1500 * time.Millisecond},
		{"openai, a reset that does not parse", map[string]string{"x-ratelimit-remaining-requests": "0", "x-ratelimit-reset-requests": "soon"}, 0},
		{"anthropic, tokens spent", map[string]string{"anthropic-ratelimit-tokens-remaining": "0", "anthropic-ratelimit-tokens-reset": "2026-12-07T12:00:30Z"}, 30 * time.Second},
		{"anthropic, a reset past", map[string]string{"anthropic-ratelimit-requests-remaining": "0", "anthropic-ratelimit-requests-reset": "2026-12-07T11:59:00Z"}, 0},
		{"a reset past the bound", map[string]string{"x-ratelimit-remaining-requests": "0", "x-ratelimit-reset-requests": "5h"}, budgetWaitMax},
	} {
		h := http.Header{}
		for k, v := range c.h {
			h.Set(k, v)
		}
		if got := budgetWait(h, now); got != c.want {
			t.Errorf("%s: %s; want %s", c.name, got, c.want)
		}
	}
}
