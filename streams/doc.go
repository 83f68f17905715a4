// Package streams defines Salvage's JetStream streams, subjects and headers,
// provisions them idempotently (only reading when they are already as asked,
// so that configuration can be an administrator's step), validates the
// user-supplied tokens that end up inside subjects, and retries the
// JetStream requests every layer makes through infrastructure hiccups
// (Retry).
//
// It is machinery: it carries no compatibility promise, and its exported
// names may change in any release. Import the root package
// (github.com/salvagehq/salvage) instead; only Salvage's own packages
// (the root, its integrations such as mcptools, the other machinery
// packages, cmd/ and salvagetest) import this one.
package streams
