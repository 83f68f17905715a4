package recovery

import (
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/salvagehq/salvage/salvagetype"
)

// RetryPolicy is tier 1: exponential backoff with full jitter inside the
// worker. The zero value uses the defaults above.
type RetryPolicy struct {
	// MaxRetries is how many times a call is retried (attempts = 1 + this).
	// Zero means RetriesDefault; a negative value means no retries.
	MaxRetries int
	// BaseDelay is the upper bound of the first wait.
	BaseDelay time.Duration
	// MaxDelay caps the upper bound of any one wait.
	MaxDelay time.Duration
	// TotalCap bounds the time spent on one call, waits included; past it
	// the call goes to tier 2.
	TotalCap time.Duration
	// Rand draws in [0, n); nil uses math/rand/v2. Tests inject it.
	Rand func(n int64) int64
}

// defaultRetryPolicy returns the documented defaults.
func defaultRetryPolicy() RetryPolicy {
	return RetryPolicy{MaxRetries: salvagetype.RetriesDefault, BaseDelay: salvagetype.RetryBaseDefault, MaxDelay: salvagetype.RetryMaxDefault, TotalCap: salvagetype.RetryTotalDefault}
}

func (p RetryPolicy) withDefaults() RetryPolicy {
	d := defaultRetryPolicy()
	// A negative MaxRetries (none) stays negative, so applying the
	// defaults twice cannot turn "no retries" into the default 3.
	if p.MaxRetries == 0 {
		p.MaxRetries = d.MaxRetries
	}
	if p.BaseDelay <= 0 {
		p.BaseDelay = d.BaseDelay
	}
	if p.MaxDelay <= 0 {
		p.MaxDelay = d.MaxDelay
	}
	if p.TotalCap <= 0 {
		p.TotalCap = d.TotalCap
	}
	return p
}

// Validate reports a setting out of range, naming the field.
func (p RetryPolicy) Validate() error {
	if p.BaseDelay < 0 || p.MaxDelay < 0 || p.TotalCap < 0 {
		return fmt.Errorf("recovery: RetryPolicy delays must not be negative")
	}
	if p.MaxDelay > 0 && p.BaseDelay > p.MaxDelay {
		return fmt.Errorf("recovery: RetryPolicy.BaseDelay %s exceeds MaxDelay %s", p.BaseDelay, p.MaxDelay)
	}
	return nil
}

// Backoff returns the wait before retry number retry (0-based): a uniform
// draw from [0, min(MaxDelay, BaseDelay*2^retry)] — full jitter, so workers
// that failed together do not retry together.
func (p RetryPolicy) Backoff(retry int) time.Duration {
	p = p.withDefaults()
	ceil := p.BaseDelay << min(retry, 30)
	if ceil <= 0 || ceil > p.MaxDelay {
		ceil = p.MaxDelay
	}
	draw := rand.Int64N
	if p.Rand != nil {
		draw = p.Rand
	}
	return time.Duration(draw(int64(ceil) + 1))
}

// NextWait decides whether to retry after err on retry number retry
// (0-based) with elapsed time spent so far, and how long to wait. Permanent
// and cancelled errors, and calls an open breaker refused, are never retried; a Retry-After is honoured as a
// floor; a wait that would cross TotalCap gives up.
func (p RetryPolicy) NextWait(err error, retry int, elapsed time.Duration) (time.Duration, bool) {
	wait, _, ok := p.next(err, retry, elapsed)
	return wait, ok
}

// next is NextWait that also says which limit stopped a retryable error:
// the count of retries or the total cap.
func (p RetryPolicy) next(err error, retry int, elapsed time.Duration) (time.Duration, string, bool) {
	p = p.withDefaults()
	switch ClassOf(err) {
	case salvagetype.ClassPermanent, salvagetype.ClassCancelled, salvagetype.ClassPanic, salvagetype.ClassBreakerOpen:
		return 0, "", false
	}
	if retry >= max(p.MaxRetries, 0) {
		return 0, fmt.Sprintf("the limit of %d retries (Retries)", max(p.MaxRetries, 0)), false
	}
	wait := p.Backoff(retry)
	if ra := retryAfter(err); ra > wait {
		wait = ra
	}
	if elapsed+wait > p.TotalCap {
		return 0, fmt.Sprintf("the next wait of %s would pass the total cap of %s (RetryTotal)", wait.Round(time.Millisecond), p.TotalCap), false
	}
	return wait, "", true
}
