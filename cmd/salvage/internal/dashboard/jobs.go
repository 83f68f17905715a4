package dashboard

import (
	"encoding/json"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/salvagehq/salvage/kv"
)

// jobIndex keeps every job record in memory, current through a watch on
// salvage_jobs, so a summary costs no read per job. It also keeps the
// counts behind the chunk counters: per job the most it has seen of each
// (a job's counts only grow, but a repair may briefly lower one), and the
// counts of jobs whose records are gone, so the totals never go back.
type jobIndex struct {
	mu      sync.Mutex
	jobs    map[string]kv.Job
	counted map[string]jobCounts
	retired jobCounts
	ready   chan struct{}
	once    sync.Once
}

// jobCounts are the event counts of one job, or a sum of them.
type jobCounts struct {
	Done, Cancelled, DeadLetters, Tier1Retries, Redeliveries int
}

func (c jobCounts) add(o jobCounts) jobCounts {
	return jobCounts{c.Done + o.Done, c.Cancelled + o.Cancelled, c.DeadLetters + o.DeadLetters, c.Tier1Retries + o.Tier1Retries, c.Redeliveries + o.Redeliveries}
}

func (c jobCounts) atLeast(s kv.Summary) jobCounts {
	return jobCounts{max(c.Done, s.Done), max(c.Cancelled, s.Cancelled), max(c.DeadLetters, s.DeadLetters), max(c.Tier1Retries, s.Tier1Retries), max(c.Redeliveries, s.Redeliveries)}
}

func newJobIndex() *jobIndex {
	return &jobIndex{jobs: map[string]kv.Job{}, counted: map[string]jobCounts{}, ready: make(chan struct{})}
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
		x.retired = x.retired.add(x.counted[e.Key()])
		delete(x.jobs, e.Key())
		delete(x.counted, e.Key())
	} else if json.Unmarshal(e.Value(), &j) == nil {
		x.jobs[e.Key()] = j
		x.counted[e.Key()] = x.counted[e.Key()].atLeast(j.Summary)
	}
}

// wait blocks until the watch has caught up, or a short while, so a
// summary never hangs.
func (x *jobIndex) wait() {
	select {
	case <-x.ready:
	case <-time.After(2 * time.Second):
	}
}

// snapshot returns the jobs as they stand and the event totals.
func (x *jobIndex) snapshot() ([]kv.Job, jobCounts) {
	x.wait()
	x.mu.Lock()
	defer x.mu.Unlock()
	out := make([]kv.Job, 0, len(x.jobs))
	for _, j := range x.jobs {
		out = append(out, j)
	}
	total := x.retired
	for _, c := range x.counted {
		total = total.add(c)
	}
	return out, total
}
