package salvagetype

// BulkAction is what a bulk request does to each envelope it matches.
type BulkAction string

// Bulk actions.
const (
	BulkReplay  BulkAction = "replay"
	BulkResolve BulkAction = "resolve"
	BulkAck     BulkAction = "ack"
)

// BulkMax bounds the envelopes one bulk action acts on; a larger match is
// worked through in several calls (BulkResult.Remaining).
const BulkMax = 1000

// BulkResult says what a bulk action matched and did.
type BulkResult struct {
	Action BulkAction `json:"action"`
	DryRun bool       `json:"dry_run"`
	// Matched is how many envelopes the filter matched; Remaining how
	// many of them a limit left for another call.
	Matched   int `json:"matched"`
	Remaining int `json:"remaining"`
	// Acted counts envelopes the action changed (on a dry run: that
	// would be); Unchanged those it found already so (a replay in flight,
	// an envelope acknowledged); Refused those it may not act on:
	// resolved or superseded, or whose replay Salvage refuses — in a dry
	// run as in a real one.
	Acted     int `json:"acted"`
	Unchanged int `json:"unchanged"`
	Refused   int `json:"refused"`
	// IDs lists the envelopes acted on (on a dry run: that would be), the
	// first 100.
	IDs []string `json:"ids"`
	// Failed lists envelopes whose action failed, with why.
	Failed []BulkFailure `json:"failed,omitempty"`
}

// BulkFailure is one envelope a bulk action could not act on.
type BulkFailure struct {
	ID    string `json:"envelope_id"`
	Error string `json:"error"`
}
