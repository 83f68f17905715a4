package dashboard

import (
	"sync"
	"time"

	"github.com/salvagehq/salvage"
)

// jobIndex keeps every job record in memory, current through a watch on
// salvage_jobs, so a summary costs no read per job. It also keeps the
// counts behind the chunk counters: per job the most it has seen of each
// (a job's counts only grow, but a repair may briefly lower one), and the
// counts of jobs whose records are gone, so the totals never go back.
type jobIndex struct {
	mu      sync.Mutex
	jobs    map[string]salvage.Job
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

func (c jobCounts) atLeast(s salvage.Summary) jobCounts {
	return jobCounts{max(c.Done, s.Done), max(c.Cancelled, s.Cancelled), max(c.DeadLetters, s.DeadLetters), max(c.Tier1Retries, s.Tier1Retries), max(c.Redeliveries, s.Redeliveries)}
}

func newJobIndex() *jobIndex {
	return &jobIndex{jobs: map[string]salvage.Job{}, counted: map[string]jobCounts{}, ready: make(chan struct{})}
}

// update applies one job record change; the caught-up mark means every
// existing record has been delivered.
func (x *jobIndex) update(ch salvage.Change[salvage.Job]) {
	if ch.CaughtUp {
		x.once.Do(func() { close(x.ready) })
		return
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	if ch.Deleted {
		x.retired = x.retired.add(x.counted[ch.Key])
		delete(x.jobs, ch.Key)
		delete(x.counted, ch.Key)
		return
	}
	x.jobs[ch.Key] = ch.Value
	x.counted[ch.Key] = x.counted[ch.Key].atLeast(ch.Value.Summary)
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
func (x *jobIndex) snapshot() ([]salvage.Job, jobCounts) {
	x.wait()
	x.mu.Lock()
	defer x.mu.Unlock()
	out := make([]salvage.Job, 0, len(x.jobs))
	for _, j := range x.jobs {
		out = append(out, j)
	}
	total := x.retired
	for _, c := range x.counted {
		total = total.add(c)
	}
	return out, total
}
