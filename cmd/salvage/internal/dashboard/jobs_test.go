package dashboard

import (
	"testing"

	"github.com/salvagehq/salvage"
)

// TestJobIndexForgetsWhatARestartDidNotRedeliver: a job a restarted watch
// does not deliver again was removed while the watch was down: it leaves
// the listing, and its counts stay in its pipeline's totals.
func TestJobIndexForgetsWhatARestartDidNotRedeliver(t *testing.T) {
	t.Parallel()
	x := newJobIndex()
	job := func(id string, done int) salvage.Change[salvage.Job] {
		return salvage.Change[salvage.Job]{Key: id, Value: salvage.Job{ID: id, Pipeline: "p", Status: salvage.JobRunning, Chunks: 10, Summary: salvage.Summary{Done: done}}}
	}
	caughtUp := salvage.Change[salvage.Job]{CaughtUp: true}
	for _, c := range []salvage.Change[salvage.Job]{job("J1", 1), job("J2", 2), caughtUp, job("J3", 3), job("J1", 1), job("J3", 3), caughtUp} {
		x.update(c)
	}
	jobs, totals := x.snapshot()
	ids := map[string]bool{}
	for _, j := range jobs {
		ids[j.ID] = true
	}
	if len(jobs) != 2 || !ids["J1"] || !ids["J3"] || totals["p"].Done != 6 {
		t.Fatalf("jobs %v, done in all %d: want J1 and J3 listed, J2's 2 chunks still counted (6)", ids, totals["p"].Done)
	}
}
