// Package alerter raises the alert rules (a burst of envelopes, an
// envelope unresolved or unacknowledged too long, no automatic recovery)
// on salvage.alerts.<kind>, each once per episode.
//
// Comments cite the invariants of docs/design.md by number.
//
// It is machinery: it carries no compatibility promise, and its exported
// names may change in any release. Only the root package
// (github.com/salvagehq/salvage) and the tests of package consumers import
// it.
package alerter
