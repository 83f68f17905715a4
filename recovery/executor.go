package recovery

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"
	"github.com/salvagehq/salvage/salvagetype"
)

// Stats counts one chunk run's calls and tier-1 retries. It is safe for
// concurrent use by the agents of a stage.
type Stats struct {
	// Calls counts attempts that reached a tool, retries included.
	Calls atomic.Int64
	// Retries counts tier-1 retries.
	Retries atomic.Int64
	// Cached counts calls answered from the journal without running.
	Cached atomic.Int64
	// Verified counts unknown outcomes settled by asking the external
	// system.
	Verified atomic.Int64
	// Snapshots counts agent snapshots taken before irreversible calls.
	Snapshots atomic.Int64
	// PromptTokens and CompletionTokens add up the usage model calls
	// reported (calls answered from the journal spend nothing);
	// CostMicros prices it (StageRun.Prices), in millionths.
	PromptTokens, CompletionTokens, CostMicros atomic.Int64
}

// Executor applies tier 1 to every call an agent makes: it retries
// transient, rate-limited and timed-out calls with full-jitter backoff and
// never retries a permanent one. It is safe for concurrent use.
type Executor struct {
	policy RetryPolicy
	log    zerolog.Logger
	sleep  func(ctx context.Context, d time.Duration) error
	now    func() time.Time
}

// NewExecutor returns an executor with policy p (zero fields take the
// defaults). It returns an error naming a field out of range.
func NewExecutor(p RetryPolicy, log zerolog.Logger) (*Executor, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	return &Executor{policy: p.withDefaults(), log: log, sleep: sleepCtx, now: time.Now}, nil
}

// Policy returns the executor's retry policy with defaults applied.
func (e *Executor) Policy() RetryPolicy { return e.policy }

// Do runs fn until it succeeds, fails permanently, tier 1 gives up, or ctx
// ends. It blocks while it waits between attempts. On failure it returns
// the permanent error, an error wrapping ErrRetriesExhausted and the last
// error, or an error wrapping ErrJobCancelled / ctx's error.
func (e *Executor) Do(ctx context.Context, stats *Stats, op string, fn func(ctx context.Context) error) error {
	return e.DoUnless(ctx, stats, op, nil, fn)
}

// DoUnless is Do that gives up at once, returning the error as it is,
// when stop (if set) says so: a link of a fallback chain passes a rate
// limit on to the next link instead of waiting it out.
func (e *Executor) DoUnless(ctx context.Context, stats *Stats, op string, stop func(error) bool, fn func(ctx context.Context) error) error {
	start := e.now()
	for retry := 0; ; retry++ {
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("%s: %w", op, context.Cause(ctx))
		}
		stats.Calls.Add(1)
		err := fn(ctx)
		if err == nil {
			return nil
		}
		if ctx.Err() != nil && !ClassOf(err).Permanent() {
			// The call failed because we stopped it, not on its own. A
			// permanent answer came from the system itself: it stands,
			// even when a sibling's failure stopped the stage meanwhile.
			return fmt.Errorf("%s: %w", op, context.Cause(ctx))
		}
		if stop != nil && stop(err) {
			return fmt.Errorf("%s: %w", op, err)
		}
		wait, limit, ok := e.policy.next(err, retry, e.now().Sub(start))
		if !ok {
			if c := ClassOf(err); c.Permanent() || c == salvagetype.ClassCancelled || c == salvagetype.ClassBreakerOpen {
				return fmt.Errorf("%s: %w", op, err)
			}
			return fmt.Errorf("%s: %w after %d attempts (stopped by %s): %w", op, salvagetype.ErrRetriesExhausted, retry+1, limit, err)
		}
		stats.Retries.Add(1)
		e.log.Debug().Str("op", op).Int("attempt", retry+1).Dur("wait_ms", wait).Err(err).Msg("tier-1 retry")
		if err := e.sleep(ctx, wait); err != nil {
			return fmt.Errorf("%s: %w", op, context.Cause(ctx))
		}
	}
}

func sleepCtx(ctx context.Context, d time.Duration) error {
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

// Severity orders errors from a stage's agents so the chunk reports the one
// that decides its fate: a cancellation beats a permanent error, which
// beats an open breaker (the chunk is held), which beats an exhausted
// retry.
func severity(err error) int {
	switch {
	case err == nil:
		return 0
	case errors.Is(err, ErrJobCancelled):
		return 5
	case ClassOf(err).Permanent():
		return 4
	case errors.Is(err, salvagetype.ErrBreakerOpen):
		return 3
	case errors.Is(err, salvagetype.ErrRetriesExhausted):
		return 2
	}
	return 1
}
