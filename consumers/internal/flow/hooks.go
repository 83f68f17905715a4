package flow

import (
	"context"

	"github.com/salvagehq/salvage/recovery"
)

// Hooks are the points where the consumers' own tests reach into a role:
// code to run at a point (a crash test kills its process there) and an
// entry to call directly. A role's Hooks method returns its own; outside
// those tests every func stays nil and costs a nil check.
type Hooks struct {
	// AfterPublish runs right after a splitter publishes a job's chunks,
	// before it creates the job's record.
	AfterPublish func()
	// AfterDone runs right after a worker writes a chunk's done
	// checkpoint, before it acks or counts it.
	AfterDone func()
	// AfterFinish runs between a job's finish and its announcement (the
	// finished event, the span), in the process that finishes it.
	AfterFinish func()
	// Journal wraps the store a worker writes journal rows to.
	Journal func(recovery.JournalStore) recovery.JournalStore
	// Exhausted is the dead-letterer's handling of the message at seq of
	// partition k's chunk stream, which used up its deliveries, as a
	// max-deliveries advisory asks it. The dead-letterer sets it.
	Exhausted func(ctx context.Context, k int, seq, deliveries uint64) error
}
