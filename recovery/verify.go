package recovery

import (
	"fmt"
	"time"

	"github.com/salvagehq/salvage/kv"
	"github.com/salvagehq/salvage/salvagetype"
)

// errVerifiedNotApplied is the error a row verified as not applied keeps.
const errVerifiedNotApplied = "verified: the call did not take effect"

// Settle returns row, a call of t whose outcome was unknown, as the
// external system's answer v settles it: SUCCEEDED with v's output and a
// fingerprint of the effect when it was applied, else FAILED saying it
// did not take effect. A call found applied went out at least once, so
// its attempts are at least 1 whatever the run that lost its answer
// recorded.
func Settle(t *salvagetype.Tool, row kv.JournalRow, v salvagetype.Verification, now time.Time) kv.JournalRow {
	row.Verified, row.FinishedAt = true, now
	if v.Applied {
		row.Status, row.Output = salvagetype.CallSucceeded, v.Output
		row.Error, row.ErrorClass, row.ErrorStatus = "", "", 0
		row.Fingerprint = fingerprint(t, row.IdempotencyKey, v.ResourceID)
		row.Attempts = max(row.Attempts, 1)
		return row
	}
	row.Status, row.Error, row.ErrorClass = salvagetype.CallFailed, errVerifiedNotApplied, salvagetype.ClassTimeout.String()
	return row
}

// checkResult refuses what a call answered that cannot be journaled: an
// output past salvagetype.MaxOutput, or usage that is not a count of tokens.
// Either fails the call permanently with status 502, a reply that breaks
// the contract; a side effect's outcome is then unknown (OutcomeUnknown),
// so it is verified rather than taken as not applied.
func checkResult(tool string, res salvagetype.ToolResult) error {
	if n := len(res.Output); n > salvagetype.MaxOutput {
		return salvagetype.Permanent(502, fmt.Errorf("%w: %s answered %d bytes, a journal row keeps at most %d", salvagetype.ErrOutputTooLarge, tool, n, salvagetype.MaxOutput))
	}
	if err := ValidUsage(res.Usage); err != nil {
		return salvagetype.Permanent(502, fmt.Errorf("%s: %w", tool, err))
	}
	return nil
}

// ValidUsage returns an error wrapping ErrBadUsage unless u (nil: none)
// reports each count of tokens within 0..salvagetype.MaxUsageTokens.
func ValidUsage(u *salvagetype.Usage) error {
	if u == nil {
		return nil
	}
	for _, n := range []int64{u.PromptTokens, u.CompletionTokens} {
		if n < 0 || n > salvagetype.MaxUsageTokens {
			return fmt.Errorf("%w: %d prompt and %d completion tokens, each must be 0..%d", salvagetype.ErrBadUsage, u.PromptTokens, u.CompletionTokens, int64(salvagetype.MaxUsageTokens))
		}
	}
	return nil
}
