package salvagetest

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/salvagehq/salvage/kv"
)

// Settlement is what the records say of a job once nothing more happens
// to it by itself.
type Settlement struct {
	// Job is the job's record.
	Job kv.Job
	// Envelopes are its envelope records, newest first.
	Envelopes []kv.EnvelopeRecord
}

// settledPage bounds the envelopes Settled reads of one job.
const settledPage = 1000

// Settled waits up to timeout until job has settled and returns what its
// records then say: its record is finished (done, partial, incomplete or
// cancelled) and every envelope of it reached an outcome (resolved,
// superseded, escalated to a person, dead end or abandoned) — and a job
// that dead-lettered a chunk has its envelope written. It fails the test,
// with the records as they last stood, when the time is up.
//
// Tests assert counts on what it returns, never on a sample taken while
// the system still moves; timeout bounds the wait, generously (a slow
// machine makes a test slower, not red). It reads the records as an
// operator does, through js. Each of also must hold of the records too
// (say, an envelope a cancel writes: a job need not dead-letter a chunk
// to have one).
func Settled(t testing.TB, js jetstream.JetStream, job string, timeout time.Duration, also ...func(Settlement) bool) Settlement {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	var s Settlement
	var why string
	var st *kv.Stores
	ok := poll(ctx, func() bool {
		if st == nil {
			var err error
			if st, err = kv.Open(ctx, js); err != nil {
				st, why = nil, "buckets: "+err.Error()
				return false
			}
		}
		if s, why = settlement(ctx, st, job); why != "" {
			return false
		}
		for i, ok := range also {
			if !ok(s) {
				why = fmt.Sprintf("condition %d of the test does not hold", i+1)
				return false
			}
		}
		return true
	})
	if !ok {
		t.Fatalf("salvagetest: job %s not settled after %s: %s (record %+v, %d envelopes)", job, timeout, why, s.Job, len(s.Envelopes))
	}
	return s
}

// settlement reads job's records and says why they are not settled yet
// ("" when they are).
func settlement(ctx context.Context, st *kv.Stores, job string) (Settlement, string) {
	var s Settlement
	var err error
	if s.Job, err = st.Jobs.Get(ctx, job); err != nil {
		return s, "job record: " + err.Error()
	}
	if !s.Job.Finished() {
		return s, "the job is " + string(s.Job.Status)
	}
	pg, err := st.Envelopes.Page(ctx, kv.IndexFilter{Job: job}, 0, 0, settledPage, true)
	if err != nil {
		return s, "envelopes: " + err.Error()
	}
	s.Envelopes = pg.Records
	if s.Job.Summary.DeadLetters > 0 && len(s.Envelopes) == 0 {
		return s, "a chunk was dead-lettered and no envelope is written yet"
	}
	for _, r := range s.Envelopes {
		if !r.Final() {
			return s, "envelope " + r.ID + " is " + string(r.Status)
		}
	}
	return s, ""
}
