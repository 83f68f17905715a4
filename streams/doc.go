// Package streams defines Salvage's JetStream streams, subjects and headers,
// provisions them idempotently, and validates the user-supplied tokens that
// end up inside subjects.
package streams
