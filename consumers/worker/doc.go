// Package worker is the chunk worker: it takes chunks from its pipelines'
// pools, claims each by CAS, runs its stages through the journaled
// executor, checks cancellation at every stage, keeps the job's counts, and
// hands a chunk that cannot finish to the dead-letterer. Beside it run the
// holder (chunks parked on a breaker's hold or a paused pipeline's, released
// at the ramp's rate), the breakers' gate, the rate limiter and the
// tenants' shares.
//
// Comments cite the invariants of docs/design.md by number.
//
// It is machinery: it carries no compatibility promise, and its exported
// names may change in any release. Only the root package
// (github.com/salvagehq/salvage) and the tests of package consumers import
// it.
package worker
