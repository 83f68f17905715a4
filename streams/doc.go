// Package streams defines Salvage's JetStream streams, subjects and headers,
// provisions them idempotently (only reading when they are already as asked,
// so that configuration can be an administrator's step), validates the
// user-supplied tokens that end up inside subjects, and retries the
// JetStream requests every layer makes through infrastructure hiccups
// (Retry).
package streams
