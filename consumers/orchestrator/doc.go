// Package orchestrator runs the recovery of each failure envelope of its
// pipelines: it takes the envelope by CAS, decides by recovery's rules
// (recovery.Limits, recovery.End) and verifies, compensates in reverse
// order, requeues, escalates or ends it, writing every step to the
// envelope's record.
//
// Comments cite the invariants of docs/design.md by number.
//
// It is machinery: it carries no compatibility promise, and its exported
// names may change in any release. Only the root package
// (github.com/salvagehq/salvage) and the tests of package consumers import
// it.
package orchestrator
