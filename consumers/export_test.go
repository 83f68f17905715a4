package consumers

import (
	"context"

	"github.com/salvagehq/salvage/recovery"
)

// SetAfterPublish installs a hook that runs right after the splitter
// publishes a job's chunks and before it creates the record, so a test can
// crash the splitter there.
func SetAfterPublish(s *Splitter, f func()) { s.afterPublish = f }

// SetAfterDone installs a hook that runs right after a worker writes a
// chunk's done checkpoint, before it acks or counts it, so a test can kill
// the worker process there.
func SetAfterDone(w *Worker, f func()) { w.afterDone = f }

// SetAfterFinish sets a hook a worker runs between a job's finish and its
// announcement (the finished event, the span).
func SetAfterFinish(w *Worker, f func()) { w.tracker.afterFinish = f }

// SetJournal wraps the store a worker writes journal rows to, so a test
// can kill the worker process between a call's return and its row.
func SetJournal(w *Worker, wrap func(recovery.JournalStore) recovery.JournalStore) {
	inner := w.journal
	w.journal = func(j recovery.JournalStore) recovery.JournalStore { return wrap(inner(j)) }
}

// Exhausted runs the dead-letterer's handling of a chunk message that
// used up its deliveries, as a max-deliveries advisory does.
func Exhausted(d *DeadLetterer, ctx context.Context, seq, deliveries uint64) error {
	return d.exhausted(ctx, 0, seq, deliveries)
}
