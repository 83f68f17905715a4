// Package splitter turns a job message into its record and its chunks:
// it validates the job, splits its input, publishes the chunks (or parks
// them in the backlog past the job's window) and creates the record, in an
// order a crash between any two steps can repair; a job it cannot accept is
// rejected with a reason.
//
// Comments cite the invariants of docs/design.md by number.
//
// It is machinery: it carries no compatibility promise, and its exported
// names may change in any release. Only the root package
// (github.com/salvagehq/salvage) and the tests of package consumers import
// it.
package splitter
