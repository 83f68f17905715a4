// Package recovery is Salvage's domain: error classes, the tier-1 retry
// policy, the executor every call goes through, the pipeline API for
// authors, failure envelopes and their classification.
//
// Nothing here talks to NATS; the consumers package wires it to streams and
// buckets, and it is unit-tested without a server.
package recovery
