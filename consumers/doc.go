// Package consumers is the root of everything that consumes a Salvage
// stream, one package per role:
//
//   - worker: the chunk worker — claims, stages, journaled calls, the
//     holder that parks chunks on a breaker's hold and releases them, rate
//     limits, tenants' shares, pauses;
//   - splitter: turns a job message into its record and chunks;
//   - deadletter: turns max-deliveries advisories into failure envelopes,
//     and sweeps (reaps dead workers' claims, repairs what a crash left
//     half written, applies retention);
//   - orchestrator: runs an envelope's recovery (the rules are recovery's);
//   - operator: the operator's actions (list, show, replay, resolve,
//     acknowledge, bulk, approve, cancel);
//   - alerter: raises the alert rules.
//
// What the roles share — job records and their counts, envelopes sent and
// settled, admission from the backlog, cancellation and replay completion,
// publishing and tracing — is in consumers/internal/flow, which no package
// outside this tree can import. This package itself holds only the process
// identity and trace ids the root needs. The consumers are the only code
// that decides ack, nak, term and in-progress.
//
// Comments cite the invariants of docs/design.md by number. The tests in
// this directory run the roles together on a real server; a role's own
// unit tests sit beside it.
//
// It is machinery, like every package below it: no compatibility promise,
// exported names may change in any release. Import the root package
// (github.com/salvagehq/salvage) instead; only Salvage's own packages (the
// root, the other machinery packages and salvagetest) import these.
package consumers
