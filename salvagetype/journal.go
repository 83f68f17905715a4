package salvagetype

import "time"

// CallAttempt is an earlier outcome of a journaled call, kept in its row
// when a later run of the same call replaced it (a call that failed, was
// cancelled or whose outcome was unknown, then ran again).
type CallAttempt struct {
	Status      CallStatus `json:"status"`
	Error       string     `json:"error,omitempty"`
	ErrorClass  string     `json:"error_class,omitempty"`
	ErrorStatus int        `json:"error_status,omitempty"`
	Attempts    int        `json:"attempts"`
	// StartedAt and FinishedAt are when that run of the call began and
	// ended, for a timeline.
	StartedAt  time.Time `json:"started_at"`
	FinishedAt time.Time `json:"finished_at,omitzero"`
}
