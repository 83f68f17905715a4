package streams

import (
	"fmt"
	"slices"

	"github.com/salvagehq/salvage/salvagetype"
)

// reservedJobIDs are the words a job id may not be: each is a token of the
// salvage.events.<job>.<kind> namespace (salvage.events.rejected.<reason>
// would read as events of a job named "rejected").
var reservedJobIDs = []string{"rejected", EventAccepted, EventProgress, EventFinished}

// ValidateJobID checks a job id: a valid token that is not a word the
// event subjects use (rejected, accepted, progress, finished).
func ValidateJobID(id string) error {
	if err := salvagetype.ValidateToken("job_id", id); err != nil {
		return err
	}
	if slices.Contains(reservedJobIDs, id) {
		return fmt.Errorf("%w: job_id %q is reserved (the event subjects use it)", salvagetype.ErrInvalidToken, id)
	}
	return nil
}

// SafeToken turns s into a valid token: every byte ValidateToken would
// refuse becomes '-', and it is cut to MaxTokenLen. It is for ids built
// from host names; an empty s stays empty (still invalid).
func SafeToken(s string) string {
	b := []byte(s[:min(len(s), salvagetype.MaxTokenLen)])
	for i, c := range b {
		if !salvagetype.TokenByte(c) {
			b[i] = '-'
		}
	}
	return string(b)
}

func badSubject(subject, want string) error {
	return fmt.Errorf("%w: %q: %s", ErrBadSubject, subject, want)
}
