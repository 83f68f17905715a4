// Package operator is what an operator can do to jobs and envelopes:
// list, show, replay, resolve, acknowledge, bulk, approve or reject a
// held chunk, cancel a job. Every change is a CAS on the record it
// changes, so concurrent operators and orchestrators agree.
//
// Comments cite the invariants of docs/design.md by number.
//
// It is machinery: it carries no compatibility promise, and its exported
// names may change in any release. Only the root package
// (github.com/salvagehq/salvage) and the tests of package consumers import
// it.
package operator
