package salvagetype

import "time"

// Role is a part of Salvage a Client runs. Any number of processes may run
// any roles against one deployment.
type Role string

// Roles.
const (
	// RoleWorker runs the splitter and the chunk workers.
	RoleWorker Role = "worker"
	// RoleDeadLetter runs the dead-letterer, the sweeper (which also
	// repairs what crashes left half-written), the DLQ alerts and
	// retention (what finished jobs leave, removed or expired by data
	// class).
	RoleDeadLetter Role = "dead-letter"
	// RoleRecovery runs the recovery orchestrator.
	RoleRecovery Role = "recovery"
	// RoleAPI serves the NATS micro service `salvage` (salvage.api.*).
	RoleAPI Role = "api"
	// RoleNone runs nothing: Start only provisions the streams and
	// buckets. It is what a process that only submits, watches or serves
	// a dashboard runs; it may not be combined with another role.
	RoleNone Role = "none"
)

// Worker is one live Salvage process as its heartbeat describes it: its
// roles, the pipelines whose chunks it runs, how many of each at once and
// how many now. A process that stops heartbeating drops out of the list
// within 30 seconds.
type Worker struct {
	ID        string   `json:"id"`
	Host      string   `json:"host,omitempty"`
	PID       int      `json:"pid,omitempty"`
	Roles     []Role   `json:"roles"`
	Pipelines []string `json:"pipelines"`
	// Recovers are the pipelines whose envelopes it recovers (its
	// recovery role runs their verify and compensation tools).
	Recovers []string `json:"recovers,omitempty"`
	// Concurrency is how many chunks of each pipeline it runs at once;
	// InFlight how many it runs now.
	Concurrency int `json:"concurrency,omitempty"`
	InFlight    int `json:"in_flight"`
	// Partitions is how many partitions its worker takes chunks from
	// (the deployment's partitions): 0 to Partitions − 1, those the deployment had
	// when it started; 0 for a process that runs no worker.
	Partitions int       `json:"partitions,omitempty"`
	StartedAt  time.Time `json:"started_at"`
	// UpdatedAt is its last heartbeat (three a lease).
	UpdatedAt time.Time `json:"updated_at"`
	// LeaseMS is the process's lease in milliseconds: once that long
	// has passed since its last heartbeat, it is dead to the others and
	// the chunks it held go back to their pools.
	LeaseMS int64 `json:"lease_ms,omitempty"`
}
