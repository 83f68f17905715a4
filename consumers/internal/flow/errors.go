package flow

import "errors"

var (
	// ErrInvalidConfig is returned by constructors when a setting is out of
	// range; the message names the field.
	ErrInvalidConfig = errors.New("consumers: invalid config")
	// ErrStale is the cancellation cause of a chunk whose claim was lost:
	// the worker stops without acking.
	ErrStale = errors.New("consumers: claim lost, worker is stale")
	// ErrDraining is the cancellation cause of chunks still running when a
	// drain ran out of time: they are released for another worker.
	ErrDraining = errors.New("consumers: worker draining")
	// ErrNoRecord is an envelope in SALVAGE_DLQ whose record the
	// dead-letterer has not written (yet).
	ErrNoRecord = errors.New("consumers: envelope has no record yet")
	// ErrSplitStalled ends a split that made no progress for three
	// AckWaits.
	ErrSplitStalled = errors.New("consumers: split made no progress")
)
