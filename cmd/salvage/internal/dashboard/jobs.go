package dashboard

import (
	"encoding/json"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/salvagehq/salvage/kv"
)

// jobIndex keeps every job record in memory, current through a watch on
// salvage_jobs, so a summary costs no read per job.
type jobIndex struct {
	mu    sync.Mutex
	jobs  map[string]kv.Job
	ready chan struct{}
	once  sync.Once
}

func newJobIndex() *jobIndex {
	return &jobIndex{jobs: map[string]kv.Job{}, ready: make(chan struct{})}
}

// update applies one salvage_jobs entry; the nil marker means every
// existing record has been delivered.
func (x *jobIndex) update(e jetstream.KeyValueEntry) {
	if e == nil {
		x.once.Do(func() { close(x.ready) })
		return
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	var j kv.Job
	if e.Operation() != jetstream.KeyValuePut {
		delete(x.jobs, e.Key())
	} else if json.Unmarshal(e.Value(), &j) == nil {
		x.jobs[e.Key()] = j
	}
}

// snapshot returns the jobs as they stand, once the watch has caught up
// (or after a short wait, so a summary never hangs).
func (x *jobIndex) snapshot() []kv.Job {
	select {
	case <-x.ready:
	case <-time.After(2 * time.Second):
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	out := make([]kv.Job, 0, len(x.jobs))
	for _, j := range x.jobs {
		out = append(out, j)
	}
	return out
}
