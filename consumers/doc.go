// Package consumers holds everything that consumes a Salvage stream: the
// splitter, the chunk worker, the dead-letterer and its sweeper, the
// holder that parks and releases chunks, the recovery orchestrator, and the
// operator's actions (cancel, replay, resolve, acknowledge, bulk, approve,
// pause) that change what those consumers do. It is the only package that
// decides ack, nak, term and in-progress. What a recovery does is decided
// in recovery; the orchestrator here reads the records, makes the calls
// and writes the outcome.
//
// Comments cite the invariants of docs/design.md by number.
//
// It is machinery: it carries no compatibility promise, and its exported
// names may change in any release. Import the root package
// (github.com/salvagehq/salvage) instead; only Salvage's own packages
// (the root, its integrations such as mcptools, the other machinery
// packages, cmd/ and salvagetest) import this one.
package consumers
