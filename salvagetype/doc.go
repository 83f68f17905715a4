// Package salvagetype defines the words of Salvage's contract once: the
// statuses of jobs, chunks, calls, envelopes and breakers, the failure
// categories and recovery strategies, the kinds of a chunk's events and of
// a limit. The JSON records and subject tokens spell these values, and
// scripts depend on them.
//
// It holds types and constants only, so every layer can import it: the
// root package salvage re-exports each name (salvage.JobRunning is
// salvagetype.JobRunning), and the machinery (kv, recovery, consumers,
// streams) uses the same values, so a status is never spelled twice. A
// pipeline author needs only the root package; this one is for code that
// wants the words without the client.
package salvagetype
