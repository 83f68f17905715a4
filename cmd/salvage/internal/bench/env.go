// Package bench holds salvage bench, the performance harness: each row
// starts its own embedded servers and worker processes (the demo's) and
// measures throughput, latency, crash recovery, cost growth and fairness.
package bench

import "github.com/salvagehq/salvage/cmd/salvage/internal/demo"

// Env is what the bench's commands share: the demo's environment, whose
// worker processes and deployments the rows start.
type Env struct {
	*demo.Env
}
