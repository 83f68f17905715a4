// Package salvagetype defines once what users of Salvage read and what
// pipeline authors write: the statuses of jobs, chunks, calls, envelopes,
// breakers and pipelines, the failure categories, recovery strategies and
// error classes; the authoring types (Stage, Agent, Turn, Tool,
// SideEffect, ToolCall, ToolResult, Verification, AgentState, CallError);
// the records a user reads whole (Envelope, Limit, Worker, Budget,
// Summary, Usage, BulkResult, ...); the defaults, bounds and sentinel
// errors; and the token rule every id in a subject or key obeys. The JSON
// records and subject tokens spell these values, and scripts depend on
// them.
//
// It holds types, constants and their methods, on the standard library
// alone, so every layer can import it: the root package salvage re-exports
// each name (salvage.JobRunning is salvagetype.JobRunning, salvage.Stage
// is salvagetype.Stage), and the machinery (kv, recovery, consumers,
// streams) uses the same definitions, so nothing is spelled twice. A
// pipeline author needs only the root package, whose go doc names each of
// these; this package's go doc has their fields and methods. Code that
// only reads records or statuses may import it alone.
package salvagetype
