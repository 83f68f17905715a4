// Package flow is what the consumers' roles share: a job's record and
// counts (Tracker), the envelopes sent and settled (Letterer, Letter), the
// admission of chunks from the backlog, the stop and settlement of a
// cancelled job's chunks, the completion of a replay, handing back a dead
// worker's claims, publishing, and the trace ids every process agrees on.
// It is internal to package consumers and its roles.
//
// Comments cite the invariants of docs/design.md by number.
package flow
