package recovery

import (
	"slices"

	"github.com/salvagehq/salvage/kv"
	"github.com/salvagehq/salvage/salvagetype"
)

// What an epoch's journal says recovery must act on: the decisions the
// orchestrator takes from it (what to verify, what to undo and in which
// order, what stands and so escalates) read these.

// Rows are one epoch's journal rows by key, as kv's Journal.Load returns
// them: what recovery reads to decide what a chunk's calls left behind.
type Rows map[string]kv.StoredRow

// Entries lists the keys of the rows by what recovery does with them:
// completed calls, calls in flight (to verify), and the reversible effects
// to undo, newest first — the order compensation runs in. It also returns
// the last failed call.
func (rows Rows) Entries() (completed, inFlight, pending []string, failed kv.JournalRow) {
	completed, inFlight, pending = []string{}, []string{}, []string{}
	for _, r := range rows.Sorted() {
		switch r.Status {
		case salvagetype.CallSucceeded:
			completed = append(completed, r.Key)
			if r.Fingerprint != nil && r.Fingerprint.Reversible {
				pending = append(pending, r.Key)
			}
		case salvagetype.CallInitiated, salvagetype.CallUnknown:
			inFlight = append(inFlight, r.Key)
		case salvagetype.CallFailed:
			failed = r.JournalRow
		}
	}
	slices.Reverse(pending) // newest first
	return completed, inFlight, pending, failed
}

// Standing lists the effects of the rows that may stand,
// newest first (the order in which a person would undo them): succeeded
// side effects, and calls in flight, whose outcome is unknown. A chunk
// with any is never a dead end: it is compensated or escalated.
func (rows Rows) Standing() []salvagetype.LeftEffect {
	out := []salvagetype.LeftEffect{}
	sorted := rows.Sorted()
	slices.Reverse(sorted)
	for _, r := range sorted {
		switch {
		case r.Status == salvagetype.CallSucceeded && r.Fingerprint != nil:
			out = append(out, salvagetype.LeftEffect{Tool: r.Tool, System: r.System, ResourceID: r.Fingerprint.ResourceID,
				JournalKey: r.Key, IdempotencyKey: r.IdempotencyKey, Reversible: r.Fingerprint.Reversible})
		case r.Status == salvagetype.CallInitiated || r.Status == salvagetype.CallUnknown:
			// Only a side effect leaves a row unknown (a pure call writes
			// its outcome or nothing).
			out = append(out, salvagetype.LeftEffect{Tool: r.Tool, System: r.System, JournalKey: r.Key, IdempotencyKey: r.IdempotencyKey, Unknown: true})
		}
	}
	return out
}
