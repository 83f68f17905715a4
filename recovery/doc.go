// Package recovery is Salvage's domain: the authoring types a pipeline is
// made of (Stage, Agent, Turn, Tool, SideEffect, ToolCall, ToolResult,
// Verification: the root package aliases them, so each is defined once),
// the Plan a worker runs, error classes, the tier-1 retry policy, the
// journaled executor every call goes through, failure envelopes and their
// classifier, strategies, compensation, verification, breakers, alerts and
// prices; and the orchestrator's rules: what an envelope's recovery runs
// next (Limits.Next, Limits.Resume, CompensatesFirst), what a journal leaves to undo or to
// verify (Rows), and how a recovery ends (End).
//
// It starts no consumer and publishes nothing itself: it uses the record
// types of kv, and the journal and snapshot stores it is handed (kv's, on
// JetStream, in the product; in-memory ones in its unit tests). The
// consumers package wires it to the streams.
//
// Comments cite the invariants of docs/design.md by number.
//
// It is machinery: it carries no compatibility promise, and its exported
// names may change in any release. Import the root package
// (github.com/salvagehq/salvage) instead; only Salvage's own packages
// (the root, its integrations such as mcptools, the other machinery
// packages, cmd/ and salvagetest) import this one.
package recovery
