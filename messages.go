package salvage

import "github.com/salvagehq/salvage/salvagetype"

// The bodies of the messages on the contract's subjects, for a program
// that publishes jobs or reads events with nats.go alone (the README's
// "The contract" lists the subjects).
type (
	// JobMsg is the body of a job published on salvage.jobs.<pipeline>
	// (what JobSubmit publishes).
	JobMsg = salvagetype.JobMsg
	// ChunkMsg is a chunk on SALVAGE_CHUNKS or SALVAGE_BACKLOG:
	// self-contained, so a hand replay without headers still works.
	ChunkMsg = salvagetype.ChunkMsg
	// JobEvent is published on salvage.events.<job>.<kind>: accepted,
	// progress (a chunk's outcome changed), finished, cancelled.
	JobEvent = salvagetype.JobEvent
	// ApprovalEvent is published on salvage.events.<job>.approval when a
	// chunk is parked before a stage that requires a person's approval.
	ApprovalEvent = salvagetype.ApprovalEvent
)
