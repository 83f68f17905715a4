package chatmodel

import (
	"net/http"
	"time"
)

// budgetWaitMax bounds the wait a provider's headers can ask for.
const budgetWaitMax = 10 * time.Minute

// budgetWait reads a successful answer's rate-limit headers: when they
// say nothing is left of the provider's requests or tokens, how long until
// some is (salvage.ToolResult.Wait); 0 when something is left or they say
// nothing. OpenAI sends x-ratelimit-remaining-requests and -tokens with
// x-ratelimit-reset-requests and -tokens as durations ("1s", "6m0s");
// Anthropic anthropic-ratelimit-requests-remaining and -tokens-remaining
// with RFC 3339 resets.
func budgetWait(h http.Header, now time.Time) time.Duration {
	var wait time.Duration
	for _, kind := range []string{"requests", "tokens"} {
		if h.Get("X-Ratelimit-Remaining-"+kind) == "0" {
			if d, err := time.ParseDuration(h.Get("X-Ratelimit-Reset-" + kind)); err == nil {
				wait = max(wait, d)
			}
		}
		if h.Get("Anthropic-Ratelimit-"+kind+"-Remaining") == "0" {
			if t, err := time.Parse(time.RFC3339, h.Get("Anthropic-Ratelimit-"+kind+"-Reset")); err == nil {
				wait = max(wait, t.Sub(now))
			}
		}
	}
	return min(max(wait, 0), budgetWaitMax)
}
