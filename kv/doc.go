// Package kv holds Salvage's typed JetStream key-value stores — jobs,
// claims, checkpoints, the journal, envelope records, breakers, pipelines,
// workers — and the snapshot object store, with the record types the other
// layers share. Every write that two processes can race on is a
// compare-and-swap on the key's revision.
//
// Comments cite the invariants of docs/design.md by number.
//
// It is machinery: it carries no compatibility promise, and its exported
// names may change in any release. Import the root package
// (github.com/salvagehq/salvage) instead; only Salvage's own packages
// (the root, its integrations such as mcptools, the other machinery
// packages, cmd/ and salvagetest) import this one.
package kv
