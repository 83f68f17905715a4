package salvage

import (
	"github.com/salvagehq/salvage/consumers"
	"github.com/salvagehq/salvage/kv"
)

// The public views of the machinery's records, field by field: a field
// the machinery adds is shown here or named hidden in views_test.go,
// which fails otherwise (and when a field shown is not copied).

// jobOf is job record j as users see it: all but SourceSeq (the job
// message's sequence), Finishes (how often it finished) and Unannounced
// (a finish whose announcement is owed), which only the machinery reads.
func jobOf(j kv.Job) Job {
	return Job{ID: j.ID, Pipeline: j.Pipeline, Status: JobStatus(j.Status), Chunks: j.Chunks, TraceID: j.TraceID,
		Budget: j.Budget, Metadata: j.Metadata, Tenant: j.Tenant, Window: j.Window, Partition: j.Partition, InputHash: j.InputHash, ChunksRoot: j.ChunksRoot, Summary: j.Summary,
		Explanation: j.Explanation, CancelledAt: j.CancelledAt, CancelReason: j.CancelReason,
		BudgetExceededAt: j.BudgetExceededAt, BudgetEnvelope: j.BudgetEnvelope,
		CreatedAt: j.CreatedAt, UpdatedAt: j.UpdatedAt, FinishedAt: j.FinishedAt, Retention: j.Retention, KeptUntil: j.KeptUntil}
}

// chunkOf is checkpoint cp as an operator sees it: all but the fence
// (ClaimRevision), the message sequence, snapshots, stage outputs, cost
// and the Counted* fields that record what the job has counted of it.
func chunkOf(cp kv.Checkpoint) Chunk {
	return Chunk{Job: cp.Job, Chunk: cp.Chunk, Stage: cp.Stage, Status: ChunkStatus(cp.Status), ClaimedBy: cp.ClaimedBy,
		Epoch: cp.Epoch, Compensated: cp.Compensated, Recoveries: cp.Recoveries, Gaps: cp.Gaps,
		Deliveries: cp.Deliveries, Redeliveries: cp.Redeliveries, Takeovers: cp.Takeovers, Tier1Retries: cp.Tier1Retries,
		Calls: cp.Calls, CachedCalls: cp.CachedCalls, PromptTokens: cp.PromptTokens, CompletionTokens: cp.CompletionTokens,
		DeadLetters: cp.DeadLetters, Envelope: cp.Envelope, Reason: cp.Reason, HeldOn: cp.HeldOn, Holds: cp.Holds,
		Approvals: cp.Approvals, LastError: cp.LastError, LastErrorClass: cp.LastErrorClass,
		LastErrorStatus: cp.LastErrorStatus, LastErrorAgent: cp.LastErrorAgent, LastErrorTool: cp.LastErrorTool,
		LastErrorCall: cp.LastErrorCall, LastErrorOlder: cp.LastErrorOlder, UpdatedAt: cp.UpdatedAt, KeptUntil: cp.KeptUntil}
}

// envelopeRecordOf is an envelope's record: all but the orchestrator's
// lease (RecoveringBy, LeaseUntil) and the alerts already raised for it.
func envelopeRecordOf(r kv.EnvelopeRecord) EnvelopeRecord {
	return EnvelopeRecord{ID: r.ID, Job: r.Job, Chunk: r.Chunk, Category: Category(r.Category), Strategy: Strategy(r.Strategy),
		Status: EnvelopeStatus(r.Status), Attempts: r.Attempts, Notes: r.Notes, StreamSeq: r.StreamSeq, Subject: r.Subject,
		DLQSeq: r.DLQSeq, TraceID: r.TraceID, Replays: r.Replays, Requeued: r.Requeued, Left: r.Left,
		SupersededBy: r.SupersededBy, Human: r.Human, ResolvedBy: r.ResolvedBy, Stopped: r.Stopped, Rejected: r.Rejected,
		AckedBy: r.AckedBy, AckedAt: r.AckedAt, CreatedAt: r.CreatedAt, UpdatedAt: r.UpdatedAt, StatusAt: r.StatusAt}
}

// callOf is journal row r: all but RetryableAfterCompensation (the tool's
// declaration, read by the classifier) and HistoryDropped.
func callOf(r kv.JournalRow) Call {
	out := Call{Key: r.Key, Job: r.Job, Chunk: r.Chunk, Epoch: r.Epoch, Stage: r.Stage, Agent: r.Agent, Seq: r.Seq,
		Tool: r.Tool, System: r.System, InputHash: r.InputHash, Output: r.Output, Status: r.Status,
		IdempotencyKey: r.IdempotencyKey, Attempts: r.Attempts, LatencyMS: r.LatencyMS, LimitWaitMS: r.LimitWaitMS, Error: r.Error,
		ErrorClass: r.ErrorClass, ErrorStatus: r.ErrorStatus, Verified: r.Verified, Usage: r.Usage, Orphan: r.Orphan,
		RetentionRewrite: r.RetentionRewrite, TraceID: r.TraceID, StartedAt: r.StartedAt, FinishedAt: r.FinishedAt, History: r.History}
	if f := r.Fingerprint; f != nil {
		// The compensation's own key is the machinery's.
		out.Fingerprint = &Fingerprint{System: f.System, ResourceID: f.ResourceID, Reversible: f.Reversible, Compensation: f.Compensation}
	}
	return out
}

// callsOf is rows as calls.
func callsOf(rows []kv.JournalRow) []Call {
	out := make([]Call, 0, len(rows))
	for _, r := range rows {
		out = append(out, callOf(r))
	}
	return out
}

// detailOf is everything about one envelope.
func detailOf(d consumers.Detail) EnvelopeDetail {
	out := EnvelopeDetail{Record: envelopeRecordOf(d.Record), Envelope: d.Envelope, Journal: callsOf(d.Journal)}
	if d.Checkpoint != nil {
		cp := chunkOf(*d.Checkpoint)
		out.Checkpoint = &cp
	}
	return out
}
