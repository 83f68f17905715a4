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
	// DLQLegacy filters the envelopes published before worker pools,
	// whose subjects do not name their pipeline.
	DLQLegacy = "salvage.dlq.*.*.*"
	// CancelledEvents matches every job's EventCancelled subject.
	CancelledEvents = "salvage.events.*." + EventCancelled
)

// chunksFor filters one pipeline's chunk messages in partition k's chunk
// stream: the filter of its pool there.
func chunksFor(k int, pipeline string) string { return chunksRoot(k) + pipeline + ".>" }

// JobRef names one job as its subjects do: its partition, its pipeline
// and its id. A subject that does not carry a part leaves it unread
// (Results, Held and Event need only the id).
type JobRef struct {
	Partition int
	Pipeline  string
	Job       string
}

// Chunk names chunk n of the job.
func (j JobRef) Chunk(n int) ChunkRef {
	return ChunkRef{Pipeline: j.Pipeline, Job: j.Job, Chunk: n, Partition: j.Partition}
}

// Chunks filters the job's chunk messages in its partition's chunk
// stream.
func (j JobRef) Chunks() string { return chunksRoot(j.Partition) + j.Pipeline + "." + j.Job + ".*" }

// Backlog filters the job's backlog.
func (j JobRef) Backlog() string { return "salvage.backlog." + j.Pipeline + "." + j.Job + ".*" }

// Results filters the job's results.
func (j JobRef) Results() string { return "salvage.results." + j.Job + ".*" }

// Held filters the job's held chunks, whatever holds them.
func (j JobRef) Held() string { return "salvage.hold.*." + j.Job + ".*" }

// Event is the subject of the job's lifecycle event of kind
// (EventAccepted, EventProgress, EventFinished, ...):
// salvage.events.<job>.<kind>.
func (j JobRef) Event(kind string) string { return "salvage.events." + j.Job + "." + kind }

// Subject is the chunk's work-queue subject in its partition:
// salvage.chunks.<pipeline>.<job>.<chunk> in partition 0,
// salvage.part.<k>.chunks.<pipeline>.<job>.<chunk> in the others.
func (c ChunkRef) Subject() string {
	return chunksRoot(c.Partition) + c.Pipeline + "." + c.Job + "." + strconv.Itoa(c.Chunk)
}

// Backlog is where the chunk waits for admission to its chunk stream:
// salvage.backlog.<pipeline>.<job>.<chunk>.
func (c ChunkRef) Backlog() string {
	return "salvage.backlog." + c.Pipeline + "." + c.Job + "." + strconv.Itoa(c.Chunk)
}

// Result carries the findings of the finished chunk:
// salvage.results.<job>.<chunk>.
func (c ChunkRef) Result() string { return "salvage.results." + c.Job + "." + strconv.Itoa(c.Chunk) }

// DLQ carries the chunk's failure envelope of category:
// salvage.dlq.<category>.<pipeline>.<job>.<chunk>.
func (c ChunkRef) DLQ(category salvagetype.Category) string {
	return "salvage.dlq." + string(category) + "." + c.Pipeline + "." + c.Job + "." + strconv.Itoa(c.Chunk)
}

// Hold is where the chunk waits while system's breaker is open (or, for
// SystemApproval, until a person approves it):
// salvage.hold.<system>.<job>.<chunk>.
func (c ChunkRef) Hold(system string) string {
	return "salvage.hold." + system + "." + c.Job + "." + strconv.Itoa(c.Chunk)
}

// dlqFor filters the envelopes of one pipeline's chunks, whatever their
// category: the filter of its recovery pool. It matches the six tokens of
// ChunkRef.DLQ only, never an envelope of the five-token shape used before
// worker pools (salvage.dlq.<category>.<job>.<chunk>).
func dlqFor(pipeline string) string { return "salvage.dlq.*." + pipeline + ".*.*" }

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

// ChunkRef names one chunk of one job as its subjects do, and the
// partition whose chunk stream carries it. A subject that does not carry
// a part leaves it unread.
type ChunkRef struct {
	Pipeline  string
	Job       string
	Chunk     int
	Partition int
}

// ParseChunkSubject splits salvage.chunks.<pipeline>.<job>.<chunk> (a
// chunk of partition 0) or salvage.part.<k>.chunks.<pipeline>.<job>.<chunk>
// (of partition k ≥ 1, written as ChunkRef.Subject writes it).
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
// which must be written as ChunkRef.Subject writes it (no sign, no leading
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

// PausedSystem is the reserved hold system of the pipeline's chunks parked
// while the pipeline is paused: paused-<pipeline>. No tool may use a
// system name that begins with "paused-".
func (p Pipeline) PausedSystem() string { return pausedPrefix + string(p) }

// System is an external system's name as the holds know it: the chunks
// parked while its breaker is open wait on its hold subjects.
type System string

// PausedPipeline reports whether the system is a paused pipeline's hold
// system, and which pipeline.
func (s System) PausedPipeline() (string, bool) {
	p, ok := strings.CutPrefix(string(s), pausedPrefix)
	return p, ok && p != ""
}

// Reserved reports whether no tool may use the system's name: approval,
// and paused-<pipeline>.
func (s System) Reserved() bool {
	return s == SystemApproval || strings.HasPrefix(string(s), pausedPrefix)
}

// Held filters the chunks held for the system: salvage.hold.<system>.>.
func (s System) Held() string { return "salvage.hold." + string(s) + ".>" }

// HoldConsumer is the durable consumer that releases the chunks held for
// the system: hold-<system>, filtered on Held. It is paused while the
// system's breaker is open.
func (s System) HoldConsumer() string { return "hold-" + string(s) }

// holdRef is a held chunk's place: the system that holds it and the
// chunk. A hold subject does not name the chunk's pipeline or partition,
// so it carries no ChunkRef whose other subjects would come out wrong.
type holdRef struct {
	System string
	Job    string
	Chunk  int
}

// Subject is the hold subject the reference was parsed from.
func (h holdRef) Subject() string {
	return ChunkRef{Job: h.Job, Chunk: h.Chunk}.Hold(h.System)
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
