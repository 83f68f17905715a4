package recovery_test

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/rs/zerolog"

	"github.com/salvagehq/salvage/recovery"
	"github.com/salvagehq/salvage/salvagetype"
)

// The tests in this file run tier 1 with the documented defaults inside a
// synctest bubble: time there is a fake clock that moves only when every
// goroutine of the bubble is blocked, so a 30-second cap takes no real
// time and a wait is measured exactly, however busy the machine is.

// attempts runs exec.Do with fn failing as fail says, and returns when
// each attempt began (on the bubble's clock) and Do's error.
func attempts(ctx context.Context, exec *recovery.Executor, fail func(n int) error) ([]time.Duration, error) {
	start := time.Now()
	var at []time.Duration
	err := exec.Do(ctx, &recovery.Stats{}, "op", func(context.Context) error {
		at = append(at, time.Since(start))
		return fail(len(at))
	})
	return at, err
}

// TestTier1WaitsItsCeilings: with every draw at its ceiling, the default
// policy retries after exactly 1 s, 2 s and 4 s, then gives up (3
// retries); with draws at the floor, at once — full jitter spans the
// whole range.
func TestTier1WaitsItsCeilings(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name string
		draw func(n int64) int64
		want []time.Duration
	}{
		{"ceiling", func(n int64) int64 { return n - 1 }, []time.Duration{0, time.Second, 3 * time.Second, 7 * time.Second}},
		{"floor", func(int64) int64 { return 0 }, []time.Duration{0, 0, 0, 0}},
	} {
		t.Run(c.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				p := recovery.DefaultRetryPolicy()
				p.Rand = c.draw
				exec, err := recovery.NewExecutor(p, zerolog.Nop())
				if err != nil {
					t.Fatal(err)
				}
				at, err := attempts(t.Context(), exec, func(int) error { return salvagetype.Transient(503, nil) })
				if !errors.Is(err, salvagetype.ErrRetriesExhausted) {
					t.Fatalf("err %v; want retries exhausted", err)
				}
				if len(at) != len(c.want) {
					t.Fatalf("attempts at %v; want %v", at, c.want)
				}
				for i := range at {
					if at[i] != c.want[i] {
						t.Fatalf("attempts at %v; want %v", at, c.want)
					}
				}
			})
		})
	}
}

// TestTier1JitterStaysUnderItsCeilings: with the real random source, each
// wait lies within its ceiling (1 s, 2 s, 4 s) and a hundred calls do not
// all wait the same — workers that failed together retry apart.
func TestTier1JitterStaysUnderItsCeilings(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		exec, err := recovery.NewExecutor(recovery.DefaultRetryPolicy(), zerolog.Nop())
		if err != nil {
			t.Fatal(err)
		}
		ceilings := []time.Duration{time.Second, 2 * time.Second, 4 * time.Second}
		firsts := map[time.Duration]bool{}
		for range 100 {
			at, _ := attempts(t.Context(), exec, func(int) error { return salvagetype.Transient(503, nil) })
			if len(at) != 4 {
				t.Fatalf("attempts at %v; want 4", at)
			}
			for i, ceil := range ceilings {
				if wait := at[i+1] - at[i]; wait < 0 || wait > ceil {
					t.Fatalf("wait %d was %s; want within [0, %s]", i+1, wait, ceil)
				}
			}
			firsts[at[1]] = true
		}
		if len(firsts) < 50 {
			t.Fatalf("100 calls drew %d distinct first waits; want them spread", len(firsts))
		}
	})
}

// TestTier1HonoursRetryAfterUpToTheCap: a Retry-After is a floor on the
// wait, and a call whose next wait would pass the 30 s total cap goes to
// tier 2 at once instead of waiting it out.
func TestTier1HonoursRetryAfterUpToTheCap(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		p := recovery.DefaultRetryPolicy()
		p.Rand = func(int64) int64 { return 0 }
		exec, err := recovery.NewExecutor(p, zerolog.Nop())
		if err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		at, err := attempts(t.Context(), exec, func(int) error { return salvagetype.RateLimited(20*time.Second, nil) })
		if !errors.Is(err, salvagetype.ErrRetriesExhausted) || !errors.Is(err, salvagetype.ErrRateLimited) {
			t.Fatalf("err %v; want retries exhausted on a rate limit", err)
		}
		if want := []time.Duration{0, 20 * time.Second}; len(at) != 2 || at[0] != want[0] || at[1] != want[1] {
			t.Fatalf("attempts at %v; want %v (the second wait of 20 s would pass 30 s)", at, want)
		}
		if took := time.Since(start); took != 20*time.Second {
			t.Fatalf("Do returned after %s; want 20 s, not a wait past the cap", took)
		}
	})
}

// TestTier1WaitEndsWithTheJob: a cancellation during a wait ends it
// then, not when the wait would have.
func TestTier1WaitEndsWithTheJob(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		p := recovery.DefaultRetryPolicy()
		p.Rand = func(n int64) int64 { return n - 1 }
		exec, err := recovery.NewExecutor(p, zerolog.Nop())
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancelCause(t.Context())
		go func() {
			time.Sleep(1500 * time.Millisecond) // the job is cancelled half-way through the second wait
			cancel(recovery.ErrJobCancelled)
		}()
		start := time.Now()
		at, err := attempts(ctx, exec, func(int) error { return salvagetype.Transient(503, nil) })
		if !errors.Is(err, recovery.ErrJobCancelled) {
			t.Fatalf("err %v; want the cancellation", err)
		}
		if took := time.Since(start); len(at) != 2 || took != 1500*time.Millisecond {
			t.Fatalf("%d attempts, returned after %s; want 2, at the cancel (1.5 s)", len(at), took)
		}
	})
}
