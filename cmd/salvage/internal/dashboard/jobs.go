package dashboard

import (
	"maps"
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/salvagehq/salvage"
)

// jobIndex keeps every job's listing fields (listed) in memory, current
// through a watch on salvage_jobs, so a summary costs no read per job. It also keeps the
// counts behind the chunk and job counters: per job the most it has seen
// of each (a job's counts only grow, but a repair may briefly lower one),
// and, per pipeline, the counts of jobs whose records are gone, so the
// totals never go back. It observes how long each job took, from its
// creation to each final status it reached (once per status and job).
type jobIndex struct {
	duration *prometheus.HistogramVec

	mu      sync.Mutex
	jobs    map[string]jobEntry
	counted map[string]jobCounts
	retired map[string]jobCounts // pipeline -> counts of removed jobs
	gens    generations
}

// listed is what the index keeps of a job record: what the job list and
// the summary show. The rest (metadata, explanation, budget, hashes, trace
// id) stays in the store, where a job's page reads it.
func listed(j salvage.Job) salvage.Job {
	return salvage.Job{ID: j.ID, Pipeline: j.Pipeline, Status: j.Status, Chunks: j.Chunks, Summary: j.Summary, CreatedAt: j.CreatedAt}
}

// jobEntry is a job record and the generation of the watch that last
// delivered it.
type jobEntry struct {
	job salvage.Job
	gen bool
}

// jobCounts are the event counts of one job, or a sum of them: chunk
// outcomes, retries, and the final statuses the job reached (a job
// replayed from incomplete to done reached both).
type jobCounts struct {
	Done, Cancelled, DeadLetters, Tier1Retries, Redeliveries int
	Finished                                                 map[salvage.JobStatus]int
}

func (c jobCounts) add(o jobCounts) jobCounts {
	out := jobCounts{c.Done + o.Done, c.Cancelled + o.Cancelled, c.DeadLetters + o.DeadLetters, c.Tier1Retries + o.Tier1Retries, c.Redeliveries + o.Redeliveries, nil}
	for _, m := range []map[salvage.JobStatus]int{c.Finished, o.Finished} {
		for s, n := range m {
			if out.Finished == nil {
				out.Finished = map[salvage.JobStatus]int{}
			}
			out.Finished[s] += n
		}
	}
	return out
}

// seen takes in a job's record as it stands now.
func (c jobCounts) seen(j salvage.Job) jobCounts {
	out := jobCounts{max(c.Done, j.Summary.Done), max(c.Cancelled, j.Summary.Cancelled), max(c.DeadLetters, j.Summary.DeadLetters),
		max(c.Tier1Retries, j.Summary.Tier1Retries), max(c.Redeliveries, j.Summary.Redeliveries), c.Finished}
	if j.Status.Finished() && c.Finished[j.Status] == 0 {
		out.Finished = maps.Clone(c.Finished)
		if out.Finished == nil {
			out.Finished = map[salvage.JobStatus]int{}
		}
		out.Finished[j.Status] = 1
	}
	return out
}

func newJobIndex() *jobIndex {
	return &jobIndex{jobs: map[string]jobEntry{}, counted: map[string]jobCounts{}, retired: map[string]jobCounts{}, gens: newGenerations(),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "salvage_job_duration_seconds", Help: "Time from a job's creation to a final status (done, partial, incomplete, cancelled), by pipeline and that status; a job replayed from incomplete to done is observed at each.",
			// 1 s to about 9 hours.
			Buckets: prometheus.ExponentialBuckets(1, 2, 16),
		}, []string{"pipeline", "status"})}
}

// update applies one job record change; the caught-up mark means every
// existing record has been delivered.
func (x *jobIndex) update(ch salvage.Change[salvage.Job]) {
	x.mu.Lock()
	defer x.mu.Unlock()
	if ch.CaughtUp {
		// A job a restarted watch did not deliver again was removed
		// while it was down.
		for id, e := range x.jobs {
			if x.gens.stale(e.gen) {
				x.remove(id)
			}
		}
		x.gens.end()
		return
	}
	if ch.Deleted {
		x.remove(ch.Key)
		return
	}
	j, before := ch.Value, x.counted[ch.Key]
	x.jobs[ch.Key] = jobEntry{job: listed(j), gen: x.gens.current()}
	x.counted[ch.Key] = before.seen(j)
	if j.Status.Finished() && before.Finished[j.Status] == 0 {
		end := j.UpdatedAt
		if j.FinishedAt != nil {
			end = *j.FinishedAt
		}
		if d := end.Sub(j.CreatedAt); !j.CreatedAt.IsZero() && d >= 0 {
			x.duration.WithLabelValues(j.Pipeline, string(j.Status)).Observe(d.Seconds())
		}
	}
}

// remove forgets job id, keeping its counts among its pipeline's retired
// ones so the totals never go back.
func (x *jobIndex) remove(id string) {
	if e, ok := x.jobs[id]; ok {
		x.retired[e.job.Pipeline] = x.retired[e.job.Pipeline].add(x.counted[id])
	}
	delete(x.jobs, id)
	delete(x.counted, id)
}

// Describe and Collect make the index the collector of its duration
// histogram, collected once the watch has caught up (as the summary's
// counts are): a scrape just after a start does not see a part of it.
func (x *jobIndex) Describe(ch chan<- *prometheus.Desc) { x.duration.Describe(ch) }

// Collect collects the duration histogram once the watch caught up.
func (x *jobIndex) Collect(ch chan<- prometheus.Metric) {
	x.gens.wait()
	x.duration.Collect(ch)
}

// snapshot returns the jobs as they stand and the event totals by
// pipeline.
func (x *jobIndex) snapshot() ([]salvage.Job, map[string]jobCounts) {
	x.gens.wait()
	x.mu.Lock()
	defer x.mu.Unlock()
	out := make([]salvage.Job, 0, len(x.jobs))
	totals := maps.Clone(x.retired)
	for id, e := range x.jobs {
		j := e.job
		out = append(out, j)
		totals[j.Pipeline] = totals[j.Pipeline].add(x.counted[id])
	}
	return out, totals
}
