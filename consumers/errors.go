package consumers

import "errors"

var (
	// errInvalidConfig is returned by constructors when a setting is out of
	// range; the message names the field.
	errInvalidConfig = errors.New("consumers: invalid config")
	// errStale is the cancellation cause of a chunk whose claim was lost:
	// the worker stops without acking.
	errStale = errors.New("consumers: claim lost, worker is stale")
	// errDraining is the cancellation cause of chunks still running when a
	// drain ran out of time: they are released for another worker.
	errDraining = errors.New("consumers: worker draining")
	// errNoRecord is an envelope in SALVAGE_DLQ whose record the
	// dead-letterer has not written (yet).
	errNoRecord = errors.New("consumers: envelope has no record yet")
	// errSplitStalled ends a split that made no progress for three
	// AckWaits.
	errSplitStalled = errors.New("consumers: split made no progress")
)
