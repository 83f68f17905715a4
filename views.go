package salvage

import (
	"github.com/salvagehq/salvage/consumers/operator"
	"github.com/salvagehq/salvage/kv"
)

// The public views of the machinery's records. A job's record, an
// envelope's, a checkpoint and a journal row embed their view
// (salvagetype.Job, EnvelopeRecord, Chunk, Call): the view is the
// record's own fields, not a copy. A field the machinery adds is named
// hidden in views_test.go, which fails otherwise.

// jobOf is job record j as users see it: the salvagetype.Job it embeds,
// without SourceSeq (the job message's sequence), Finishes (how often it
// finished), Unannounced (a finish whose announcement is owed) and the
// index sequences, which only the machinery reads.
func jobOf(j kv.Job) Job { return j.Job }

// chunkOf is checkpoint cp as an operator sees it: the salvagetype.Chunk
// it embeds, without the fence (ClaimRevision), the message sequence,
// snapshots, stage outputs, cost, events and the Counted* fields that
// record what the job has counted of it.
func chunkOf(cp kv.Checkpoint) Chunk { return cp.View() }

// envelopeRecordOf is an envelope's record: the salvagetype.EnvelopeRecord
// it embeds, without the orchestrator's lease (RecoveringBy, LeaseUntil),
// the alerts already raised for it and its index sequences.
func envelopeRecordOf(r kv.EnvelopeRecord) EnvelopeRecord { return r.EnvelopeRecord }

// callOf is journal row r: the salvagetype.Call it embeds, without
// RetryableAfterCompensation (the tool's declaration, read by the
// classifier) and HistoryDropped.
func callOf(r kv.JournalRow) Call { return r.Call }

// callsOf is rows as calls.
func callsOf(rows []kv.JournalRow) []Call {
	out := make([]Call, 0, len(rows))
	for _, r := range rows {
		out = append(out, callOf(r))
	}
	return out
}

// detailOf is everything about one envelope.
func detailOf(d operator.Detail) EnvelopeDetail {
	out := EnvelopeDetail{Record: envelopeRecordOf(d.Record), Envelope: d.Envelope, Journal: callsOf(d.Journal)}
	if d.Checkpoint != nil {
		cp := chunkOf(*d.Checkpoint)
		out.Checkpoint = &cp
	}
	return out
}
