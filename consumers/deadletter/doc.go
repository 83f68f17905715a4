// Package deadletter turns the max-deliveries advisories of the chunk
// pools into failure envelopes on SALVAGE_DLQ, and runs the sweeper: it
// hands back the claims of dead workers, repairs what a crash left half
// written (a job never announced, a replay never sent, an envelope never
// indexed), sweeps the intake of unknown pipelines, and applies retention.
//
// Comments cite the invariants of docs/design.md by number.
//
// It is machinery: it carries no compatibility promise, and its exported
// names may change in any release. Only the root package
// (github.com/salvagehq/salvage) and the tests of package consumers import
// it.
package deadletter
