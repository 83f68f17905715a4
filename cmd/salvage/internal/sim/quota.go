package sim

import (
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/salvagehq/salvage"
	"github.com/salvagehq/salvage/cmd/salvage/internal/simmodel"
)

// quotaWindow is the minute a provider's rate limit looks back over.
const quotaWindow = time.Minute

// Quota is a provider's rate limit on one model, as OpenAI and Anthropic
// state theirs: requests and tokens per minute. The sim holds it over a
// sliding minute: a request is admitted when the requests, and the tokens,
// admitted in the minute before it leave room for it. A request's tokens
// are estimated when it arrives (its prompt's, as the model counts them,
// plus its max_tokens) and corrected to the usage it is answered with.
// 0 is no limit.
type Quota struct {
	RPM int   `json:"rpm,omitempty"`
	TPM int64 `json:"tpm,omitempty"`
}

// QuotaUse is what one model's quota admitted and refused (GET
// /admin/quota).
type QuotaUse struct {
	Quota    Quota `json:"quota"`
	Admitted int   `json:"admitted"`
	// Refused counts the 429s the quota answered.
	Refused int `json:"refused"`
	// Tokens are the admitted requests' tokens, as answered.
	Tokens int64 `json:"tokens"`
	// PerSecond counts each wall-clock second that had a request, oldest
	// first, the last perSecondMax of them.
	PerSecond []QuotaSecond `json:"per_second,omitempty"`
}

// QuotaSecond is one second of a quota's requests.
type QuotaSecond struct {
	Unix     int64 `json:"unix"`
	Admitted int   `json:"admitted"`
	Refused  int   `json:"refused"`
	Tokens   int64 `json:"tokens"`
}

// MaxMinute returns the most requests sent (admitted and refused) and
// the most tokens admitted in any 60 consecutive seconds.
func (u QuotaUse) MaxMinute() (requests int, tokens int64) {
	lo, sent, toks := 0, 0, int64(0)
	for _, s := range u.PerSecond {
		sent += s.Admitted + s.Refused
		toks += s.Tokens
		for u.PerSecond[lo].Unix <= s.Unix-int64(quotaWindow/time.Second) {
			sent -= u.PerSecond[lo].Admitted + u.PerSecond[lo].Refused
			toks -= u.PerSecond[lo].Tokens
			lo++
		}
		requests, tokens = max(requests, sent), max(tokens, toks)
	}
	return requests, tokens
}

// admission is one admitted request: when, and its tokens (estimated,
// then as answered).
type admission struct {
	at     time.Time
	tokens int64
	second int64
	// gone is set once the admission left the window.
	gone bool
}

// quotaState is one model's quota and the admissions of its last minute.
type quotaState struct {
	quota   Quota
	window  []*admission // oldest first
	tokens  int64        // in window
	use     QuotaUse
	seconds map[int64]int // unix second -> index in use.PerSecond
}

// quotas holds every model's quota state, apart from the sim's other
// state so that model calls do not wait on effects.
type quotas struct {
	mu     sync.Mutex
	models map[string]*quotaState
}

// set replaces the quotas, keeping what each model has admitted.
func (q *quotas) set(limits map[string]Quota) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.models == nil {
		q.models = map[string]*quotaState{}
	}
	for model, st := range q.models {
		st.quota = limits[model]
		st.use.Quota = st.quota
	}
	for model, l := range limits {
		if q.models[model] == nil {
			q.models[model] = &quotaState{quota: l, use: QuotaUse{Quota: l}, seconds: map[int64]int{}}
		}
	}
}

// quotaAnswer is what the quota says of one request: admitted (a, to
// correct once answered), or refused until retryAfter; headers are the
// rate-limit headers to answer with either way.
type quotaAnswer struct {
	a          *admission
	st         *quotaState
	refused    bool
	tooLarge   bool
	retryAfter time.Duration
	limitReq   int
	limitTok   int64
	remainReq  int
	remainTok  int64
	resetReq   time.Duration
	resetTok   time.Duration
}

// admit asks model's quota for a request of estimate tokens. A model
// without a quota admits everything and answers no headers (nil).
func (q *quotas) admit(model string, estimate int64) *quotaAnswer {
	q.mu.Lock()
	defer q.mu.Unlock()
	st := q.models[model]
	if st == nil || (st.quota.RPM <= 0 && st.quota.TPM <= 0) {
		return nil
	}
	now := time.Now()
	st.prune(now)
	ans := &quotaAnswer{st: st, limitReq: st.quota.RPM, limitTok: st.quota.TPM}
	switch {
	case st.quota.TPM > 0 && estimate > st.quota.TPM:
		ans.refused, ans.tooLarge = true, true
	case st.quota.RPM > 0 && len(st.window) >= st.quota.RPM:
		ans.refused = true
		ans.retryAfter = st.window[len(st.window)-st.quota.RPM].at.Add(quotaWindow).Sub(now)
	case st.quota.TPM > 0 && st.tokens+estimate > st.quota.TPM:
		ans.refused = true
		freed := st.tokens + estimate - st.quota.TPM
		for _, a := range st.window {
			freed -= a.tokens
			if freed <= 0 {
				ans.retryAfter = a.at.Add(quotaWindow).Sub(now)
				break
			}
		}
	default:
		ans.a = &admission{at: now, tokens: estimate, second: now.Unix()}
		st.window = append(st.window, ans.a)
		st.tokens += estimate
	}
	sec := st.second(now.Unix())
	if ans.refused {
		st.use.Refused++
		sec.Refused++
	} else {
		st.use.Admitted++
		sec.Admitted++
	}
	ans.retryAfter = max(ans.retryAfter, time.Millisecond)
	st.headersInto(ans, now)
	return ans
}

// settle corrects an admitted request's tokens to what it was answered
// with; a request that got no answer keeps its estimate.
func (q *quotas) settle(ans *quotaAnswer, tokens int64) {
	if ans == nil || ans.a == nil {
		return
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	st, a := ans.st, ans.a
	if !a.gone {
		st.tokens += tokens - a.tokens
	}
	a.tokens = tokens
	st.use.Tokens += tokens
	if i, ok := st.seconds[a.second]; ok {
		st.use.PerSecond[i].Tokens += tokens
	}
}

// prune drops the admissions older than the window. Lock held.
func (st *quotaState) prune(now time.Time) {
	i := 0
	for i < len(st.window) && !st.window[i].at.Add(quotaWindow).After(now) {
		st.tokens -= st.window[i].tokens
		st.window[i].gone = true
		i++
	}
	st.window = slices.Delete(st.window, 0, i)
}

// second returns the per-second count of unix, appending it when new.
// Lock held.
func (st *quotaState) second(unix int64) *QuotaSecond {
	if i, ok := st.seconds[unix]; ok {
		return &st.use.PerSecond[i]
	}
	if len(st.use.PerSecond) >= perSecondMax {
		drop := len(st.use.PerSecond) - perSecondMax + 1
		for _, s := range st.use.PerSecond[:drop] {
			delete(st.seconds, s.Unix)
		}
		st.use.PerSecond = slices.Delete(st.use.PerSecond, 0, drop)
		for k := range st.seconds {
			st.seconds[k] -= drop
		}
	}
	st.use.PerSecond = append(st.use.PerSecond, QuotaSecond{Unix: unix})
	st.seconds[unix] = len(st.use.PerSecond) - 1
	return &st.use.PerSecond[len(st.use.PerSecond)-1]
}

// headersInto fills what remains of the quota and when it resets: the
// requests and tokens left in the minute, and the time until the window
// is empty again. Lock held.
func (st *quotaState) headersInto(ans *quotaAnswer, now time.Time) {
	var reset time.Duration
	if n := len(st.window); n > 0 {
		reset = st.window[n-1].at.Add(quotaWindow).Sub(now)
	}
	if st.quota.RPM > 0 {
		ans.remainReq = max(st.quota.RPM-len(st.window), 0)
		ans.resetReq = reset
	}
	if st.quota.TPM > 0 {
		ans.remainTok = max(st.quota.TPM-st.tokens, 0)
		ans.resetTok = reset
	}
}

// Use returns what each model's quota admitted and refused.
func (q *quotas) Use() map[string]QuotaUse {
	q.mu.Lock()
	defer q.mu.Unlock()
	out := make(map[string]QuotaUse, len(q.models))
	for model, st := range q.models {
		u := st.use
		u.PerSecond = slices.Clone(st.use.PerSecond)
		out[model] = u
	}
	return out
}

// Rate-limit headers, as OpenAI names them: what is left of the minute's
// requests and tokens, and how long until they are all back (a Go
// duration: "1s", "6m0s", "20ms").
const (
	HeaderLimitRequests     = "X-Ratelimit-Limit-Requests"
	HeaderLimitTokens       = "X-Ratelimit-Limit-Tokens"
	HeaderRemainingRequests = "X-Ratelimit-Remaining-Requests"
	HeaderRemainingTokens   = "X-Ratelimit-Remaining-Tokens"
	HeaderResetRequests     = "X-Ratelimit-Reset-Requests"
	HeaderResetTokens       = "X-Ratelimit-Reset-Tokens"
)

// Rate-limit headers, as Anthropic names them (resets as RFC 3339 times).
const (
	HeaderAnthropicRequestsLimit     = "Anthropic-Ratelimit-Requests-Limit"
	HeaderAnthropicRequestsRemaining = "Anthropic-Ratelimit-Requests-Remaining"
	HeaderAnthropicRequestsReset     = "Anthropic-Ratelimit-Requests-Reset"
	HeaderAnthropicTokensLimit       = "Anthropic-Ratelimit-Tokens-Limit"
	HeaderAnthropicTokensRemaining   = "Anthropic-Ratelimit-Tokens-Remaining"
	HeaderAnthropicTokensReset       = "Anthropic-Ratelimit-Tokens-Reset"
)

// write sets the quota's headers in OpenAI's names (anthropic: in
// Anthropic's), and on a refusal Retry-After and Retry-After-Ms.
func (ans *quotaAnswer) write(h http.Header, anthropic bool) {
	if ans == nil {
		return
	}
	now := time.Now()
	if ans.limitReq > 0 {
		if anthropic {
			h.Set(HeaderAnthropicRequestsLimit, strconv.Itoa(ans.limitReq))
			h.Set(HeaderAnthropicRequestsRemaining, strconv.Itoa(ans.remainReq))
			h.Set(HeaderAnthropicRequestsReset, now.Add(ans.resetReq).UTC().Format(time.RFC3339))
		} else {
			h.Set(HeaderLimitRequests, strconv.Itoa(ans.limitReq))
			h.Set(HeaderRemainingRequests, strconv.Itoa(ans.remainReq))
			h.Set(HeaderResetRequests, ans.resetReq.Round(time.Millisecond).String())
		}
	}
	if ans.limitTok > 0 {
		if anthropic {
			h.Set(HeaderAnthropicTokensLimit, strconv.FormatInt(ans.limitTok, 10))
			h.Set(HeaderAnthropicTokensRemaining, strconv.FormatInt(ans.remainTok, 10))
			h.Set(HeaderAnthropicTokensReset, now.Add(ans.resetTok).UTC().Format(time.RFC3339))
		} else {
			h.Set(HeaderLimitTokens, strconv.FormatInt(ans.limitTok, 10))
			h.Set(HeaderRemainingTokens, strconv.FormatInt(ans.remainTok, 10))
			h.Set(HeaderResetTokens, ans.resetTok.Round(time.Millisecond).String())
		}
	}
	if ans.refused && !ans.tooLarge {
		h.Set("Retry-After", strconv.Itoa(int((ans.retryAfter+time.Second-1)/time.Second)))
		h.Set(HeaderRetryAfterMS, strconv.FormatInt(max(ans.retryAfter.Milliseconds(), 1), 10))
	}
}

// estimateTokens is what a request will spend, as the quota counts it
// before the answer: its prompt's tokens as the model counts them, plus
// the completion it may ask for (at least one).
func estimateTokens(req salvage.ChatRequest, maxTokens int64) int64 {
	return int64(simmodel.PromptTokens(simmodel.Prompt(req))) + max(maxTokens, 1)
}

// refusal answers a request the quota refused, with writeErr (an API's
// error shape), and reports whether it did: 429 for a full minute, 400
// for a request larger than the minute's tokens.
func (ans *quotaAnswer) refusal(w http.ResponseWriter, model string, writeErr func(http.ResponseWriter, int, string, string)) bool {
	switch {
	case ans == nil || !ans.refused:
		return false
	case ans.tooLarge:
		writeErr(w, 400, "invalid_request_error", fmt.Sprintf("Request too large for %s on tokens per min (TPM): Limit %d", model, ans.limitTok))
	default:
		writeErr(w, 429, "rate_limit_exceeded", fmt.Sprintf("Rate limit reached for %s: please try again in %s", model, ans.retryAfter.Round(time.Millisecond)))
	}
	return true
}
