package streams

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/salvagehq/salvage/salvagetype"
)

// Subject roots and wildcards.
const (
	jobsPrefix   = "salvage.jobs."
	JobsAll      = "salvage.jobs.>"
	ChunksAll    = "salvage.chunks.>"
	backlogAll   = "salvage.backlog.>"
	holdAll      = "salvage.hold.>"
	ResultsAll   = "salvage.results.>"
	DLQAll       = "salvage.dlq.>"
	eventsAll    = "salvage.events.>"
	alertsAll    = "salvage.alerts.>"
	escalateAll  = "salvage.escalations.>"
	indexAll     = "salvage.index.>"
	rejectedRoot = "salvage.events.rejected."
)

// IndexEnvelope is where an envelope record in status, of category, has
// its entry (the envelope id) in the envelope index; an empty token is
// written "_".
func IndexEnvelope(status salvagetype.EnvelopeStatus, category salvagetype.Category) string {
	return "salvage.index.envelopes." + orAny(string(status)) + "." + orAny(string(category))
}

// IndexEnvelopes filters the envelope index by status and category; an
// empty one matches any.
func IndexEnvelopes(status salvagetype.EnvelopeStatus, category salvagetype.Category) string {
	return "salvage.index.envelopes." + orStar(string(status)) + "." + orStar(string(category))
}

// IndexJobEnvelopes is where an envelope record of job has its entry (the
// envelope id) in the index of one job's envelopes.
func IndexJobEnvelopes(job string) string { return "salvage.index.job-envelopes." + orAny(job) }

// IndexJobAttention is where a chunk of job that came to need a person
// (failed, parked, or carrying an envelope or an error) has its entry (the
// chunk number) in the index of one job's chunks needing attention.
func IndexJobAttention(job string) string { return "salvage.index.job-attention." + orAny(job) }

// IndexJobs is where a job record has its entry (the job id) in the job
// index.
const IndexJobs = "salvage.index.jobs"

// IndexTenantJobs is where a job record of tenant has its entry (the job
// id) in the tenant's job index.
func IndexTenantJobs(tenant string) string { return "salvage.index.tenant-jobs." + tenant }

// IndexBuilt marks an index built from the records written before it
// existed.
const IndexBuilt = "salvage.index.built"

// orAny keeps an empty token a token.
func orAny(s string) string {
	if s == "" {
		return "_"
	}
	return s
}

// orStar is s, or the wildcard "*" when s is empty.
func orStar(s string) string {
	if s == "" {
		return "*"
	}
	return s
}

// chunksFor filters one pipeline's chunk messages in partition k's chunk
// stream: the filter of its pool there.
func chunksFor(k int, pipeline string) string { return chunksRoot(k) + pipeline + ".>" }

// JobSubject is where a job for pipeline is submitted.
func JobSubject(pipeline string) string { return jobsPrefix + pipeline }

// ChunkSubject is the work-queue subject of one chunk of a job in
// partition k: salvage.chunks.<pipeline>.<job>.<chunk> in partition 0,
// salvage.part.<k>.chunks.<pipeline>.<job>.<chunk> in the others.
func ChunkSubject(k int, pipeline, job string, chunk int) string {
	return chunksRoot(k) + pipeline + "." + job + "." + strconv.Itoa(chunk)
}

// ChunksForJob filters the chunk messages of one job of partition k in
// its chunk stream.
func ChunksForJob(k int, pipeline, job string) string {
	return chunksRoot(k) + pipeline + "." + job + ".*"
}

// BacklogSubject is where a chunk waits for admission to SALVAGE_CHUNKS.
func BacklogSubject(pipeline, job string, chunk int) string {
	return "salvage.backlog." + pipeline + "." + job + "." + strconv.Itoa(chunk)
}

// BacklogForJob filters one job's backlog.
func BacklogForJob(pipeline, job string) string {
	return "salvage.backlog." + pipeline + "." + job + ".*"
}

// ResultSubject carries the findings of one finished chunk.
func ResultSubject(job string, chunk int) string {
	return "salvage.results." + job + "." + strconv.Itoa(chunk)
}

// ResultsForJob filters one job's results.
func ResultsForJob(job string) string { return "salvage.results." + job + ".*" }

// DLQSubject carries the failure envelope of one chunk of pipeline.
func DLQSubject(category salvagetype.Category, pipeline, job string, chunk int) string {
	return "salvage.dlq." + string(category) + "." + pipeline + "." + job + "." + strconv.Itoa(chunk)
}

// dlqFor filters the envelopes of one pipeline's chunks, whatever their
// category: the filter of its recovery pool. It matches the six tokens of
// DLQSubject only, never an envelope of the five-token shape used before
// worker pools (salvage.dlq.<category>.<job>.<chunk>).
func dlqFor(pipeline string) string { return "salvage.dlq.*." + pipeline + ".*.*" }

// DLQLegacy filters the envelopes published before worker pools, whose
// subjects do not name their pipeline.
const DLQLegacy = "salvage.dlq.*.*.*"

// EventSubject is a job lifecycle event (EventAccepted, EventProgress,
// EventFinished).
func EventSubject(job, kind string) string { return "salvage.events." + job + "." + kind }

// CancelledEvents matches every job's EventCancelled subject.
const CancelledEvents = "salvage.events.*." + EventCancelled

// RejectedSubject is where a rejected input is reported.
func RejectedSubject(reason salvagetype.RejectReason) string { return rejectedRoot + string(reason) }

// ParseJobSubject returns the pipeline token of salvage.jobs.<pipeline>, or
// ErrBadSubject when the subject has another shape.
func ParseJobSubject(subject string) (string, error) {
	rest, ok := strings.CutPrefix(subject, jobsPrefix)
	if !ok || rest == "" || strings.Contains(rest, ".") {
		return "", badSubject(subject, "want "+jobsPrefix+"<pipeline>")
	}
	if err := salvagetype.ValidateToken("pipeline", rest); err != nil {
		return "", err
	}
	return rest, nil
}

// ChunkRef names one chunk of one job, and the partition whose subject
// named it.
type ChunkRef struct {
	Pipeline  string
	Job       string
	Chunk     int
	Partition int
}

// ParseChunkSubject splits salvage.chunks.<pipeline>.<job>.<chunk> (a
// chunk of partition 0) or salvage.part.<k>.chunks.<pipeline>.<job>.<chunk>
// (of partition k ≥ 1, written as ChunkSubject writes it).
func ParseChunkSubject(subject string) (ChunkRef, error) {
	k, tokens := 0, subject
	if rest, ok := strings.CutPrefix(subject, partRoot); ok {
		num, tail, _ := strings.Cut(rest, ".")
		n, err := strconv.Atoi(num)
		if err != nil || n < 1 || n >= salvagetype.PartitionsMax || strconv.Itoa(n) != num || !strings.HasPrefix(tail, "chunks.") {
			return ChunkRef{}, badSubject(subject, "want salvage.part.<partition>.chunks.<pipeline>.<job>.<chunk>")
		}
		k, tokens = n, "salvage."+tail
	}
	parts := strings.Split(tokens, ".")
	if len(parts) != 5 || parts[0] != "salvage" || parts[1] != "chunks" {
		return ChunkRef{}, badSubject(subject, "want salvage.chunks.<pipeline>.<job>.<chunk>")
	}
	n, err := parseRef(subject, parts)
	if err != nil {
		return ChunkRef{}, err
	}
	return ChunkRef{Pipeline: parts[2], Job: parts[3], Chunk: n, Partition: k}, nil
}

// parseRef checks the tokens of a five-token subject
// salvage.<kind>.<token>.<job>.<chunk> and returns the chunk number,
// which must be written as ChunkSubject writes it (no sign, no leading
// zero), so a parsed subject builds the same subject again.
func parseRef(subject string, parts []string) (int, error) {
	if err := salvagetype.ValidateToken(parts[1]+" subject token", parts[2]); err != nil {
		return 0, fmt.Errorf("%w: %w", badSubject(subject, "a token is not valid"), err)
	}
	if err := ValidateJobID(parts[3]); err != nil {
		return 0, fmt.Errorf("%w: %w", badSubject(subject, "the job id is not valid"), err)
	}
	n, err := strconv.Atoi(parts[4])
	if err != nil || n < 1 || strconv.Itoa(n) != parts[4] {
		return 0, badSubject(subject, "chunk number must be a positive integer")
	}
	return n, nil
}

// SystemApproval is the reserved system name of the hold subjects of
// chunks awaiting a person's approval; no tool may use it.
const SystemApproval = "approval"

// pausedPrefix begins the reserved hold systems of paused pipelines.
const pausedPrefix = "paused-"

// PausedSystem is the reserved hold system of pipeline's chunks parked
// while the pipeline is paused: paused-<pipeline>. No tool may use a
// system name that begins with "paused-".
func PausedSystem(pipeline string) string { return pausedPrefix + pipeline }

// PausedPipeline reports whether system is a paused pipeline's hold
// system, and which pipeline.
func PausedPipeline(system string) (string, bool) {
	p, ok := strings.CutPrefix(system, pausedPrefix)
	return p, ok && p != ""
}

// ReservedSystem reports whether no tool may use system as its name:
// approval, and paused-<pipeline>.
func ReservedSystem(system string) bool {
	return system == SystemApproval || strings.HasPrefix(system, pausedPrefix)
}

// HoldSubject is where a chunk waits while system's breaker is open (or,
// for SystemApproval, until a person approves it).
func HoldSubject(system, job string, chunk int) string {
	return "salvage.hold." + system + "." + job + "." + strconv.Itoa(chunk)
}

// HoldForSystem filters the chunks held for one system.
func HoldForSystem(system string) string { return "salvage.hold." + system + ".>" }

// HoldForJob filters one job's held chunks, whatever holds them.
func HoldForJob(job string) string { return "salvage.hold.*." + job + ".*" }

// HoldConsumer is the durable consumer that releases the chunks held for
// system: hold-<system>, filtered on HoldForSystem. It is paused while
// the system's breaker is open.
func HoldConsumer(system string) string { return "hold-" + system }

// holdRef is a held chunk's place: the system that holds it and the chunk.
type holdRef struct {
	System string
	Job    string
	Chunk  int
}

// ParseHoldSubject splits salvage.hold.<system>.<job>.<chunk>.
func ParseHoldSubject(subject string) (holdRef, error) {
	parts := strings.Split(subject, ".")
	if len(parts) != 5 || parts[0] != "salvage" || parts[1] != "hold" {
		return holdRef{}, badSubject(subject, "want salvage.hold.<system>.<job>.<chunk>")
	}
	n, err := parseRef(subject, parts)
	if err != nil {
		return holdRef{}, err
	}
	return holdRef{System: parts[2], Job: parts[3], Chunk: n}, nil
}
