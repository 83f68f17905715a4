// Package kv holds Salvage's typed JetStream key-value stores: jobs, claims,
// checkpoints and envelope records. Every write that two processes can race
// on is a compare-and-swap on the key's revision.
package kv
