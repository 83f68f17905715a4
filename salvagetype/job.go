package salvagetype

import "time"

// Job is a job's record: its status and the counts of its chunks'
// outcomes, kept current in O(1) per outcome.
type Job struct {
	// ID is the job id: salvage.SubmitOpts.JobID, else a ULID.
	ID       string    `json:"job_id"`
	Pipeline string    `json:"pipeline"`
	Status   JobStatus `json:"status"`
	// Chunks is how many chunks the job's input split into.
	Chunks int `json:"chunks"`
	// TraceID is the W3C trace id every step of the job logs and carries.
	TraceID  string         `json:"trace_id"`
	Budget   *Budget        `json:"budget,omitempty"`
	Metadata map[string]any `json:"metadata,omitempty"`
	// Tenant is whose job it is (salvage.SubmitOpts.Tenant, or the pipeline's
	// TenantFrom field of Metadata); empty for nobody's in particular.
	Tenant string `json:"tenant,omitempty"`
	// Window is how many of the job's chunks were queued at once (0: all):
	// chunks 1..Window went to the work queue, the rest wait in
	// SALVAGE_BACKLOG, and chunk k starting admits chunk k+Window.
	Window int `json:"window,omitempty"`
	// Partition holds the job's chunks (salvage.Config.Partitions): chosen when
	// it was split, never changed. 0 in a deployment of one partition.
	Partition int `json:"partition"`
	// InputHash is what the job id stands for: a hash of the pipeline and
	// the input, in canonical JSON. A job id names one input.
	InputHash string `json:"input_hash,omitempty"`
	// ChunksRoot is the root of the Merkle tree over the job's chunks
	// (each chunk's job, number, pipeline and input): a worker runs a
	// chunk message only when the proof it carries leads here. Empty on
	// a job split before chunk proofs.
	ChunksRoot string `json:"chunks_root,omitempty"`
	// Summary counts the chunks' outcomes.
	Summary Summary `json:"summary"`
	// Explanation names the chunks, stages and envelopes behind a status
	// other than done (at most 20 lines).
	Explanation []string `json:"explanation,omitempty"`
	// CancelledAt is set once the job is cancelled; its chunks stop at
	// their next stage. CancelReason says why ("budget exceeded" when its
	// budget stopped it).
	CancelledAt  *time.Time `json:"cancelled_at,omitempty"`
	CancelReason string     `json:"cancel_reason,omitempty"`
	// BudgetExceededAt is when its counted spend passed its Budget;
	// BudgetEnvelope is the one BUDGET_EXCEEDED envelope that lists the
	// chunks it stopped ("-" when none was left to stop).
	BudgetExceededAt *time.Time `json:"budget_exceeded_at,omitempty"`
	BudgetEnvelope   string     `json:"budget_envelope,omitempty"`
	CreatedAt        time.Time  `json:"created_at"`
	UpdatedAt        time.Time  `json:"updated_at"`
	// FinishedAt is when the job reached its status; nil while running.
	FinishedAt *time.Time `json:"finished_at,omitempty"`
	// Retention is how long what the job leaves is kept, as recorded when
	// it was split (its pipeline's, else its deployment's); nil when
	// neither set one (the defaults apply).
	Retention *Retention `json:"retention,omitempty"`
	// KeptUntil is when the job's record expires: set once retention ran
	// on the finished job.
	KeptUntil *time.Time `json:"kept_until,omitempty"`
}

// CancelReasonBudget is Job.CancelReason of a job its budget stopped.
const CancelReasonBudget = "budget exceeded"
