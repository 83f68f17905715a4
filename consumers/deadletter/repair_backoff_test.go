package deadletter

import (
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/salvagehq/salvage/kv"
	"github.com/salvagehq/salvage/natsconf"
	"github.com/salvagehq/salvage/salvagetype"
	"github.com/salvagehq/salvage/streams"
)

// TestSweeperBacksOffAJobWithNothingToRepair: a running job idle for
// long (its chunks held, parked, or slow) is re-derived after one idle
// period, then after 1, 2, 4, … up to 16 idle periods, while
// nothing changes; a change to its record brings it back at once. (It
// used to be re-derived, O(its chunks) reads, every sweep.)
func TestSweeperBacksOffAJobWithNothingToRepair(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	js, stores := repairServer(t)
	job := kv.Job{Job: salvagetype.Job{ID: "01JBACKOFF0000000000000000", Pipeline: "p", Chunks: 3}}
	if err := stores.Jobs.Create(ctx, job); err != nil {
		t.Fatal(err)
	}
	job, err := stores.Jobs.Get(ctx, job.ID)
	if err != nil {
		t.Fatal(err)
	}
	const idle = 10 * time.Second
	r := newRepairer(js, stores, idle, zerolog.Nop())
	r.jobs[job.ID] = job
	now := job.UpdatedAt
	r.now = func() time.Time { return now }
	derived := func() bool { jobs, _ := r.stuck(now); return len(jobs) == 1 }

	// At each step: not looked at just before the wait is over, looked
	// at (and found unchanged) when it is.
	// The first look comes once the job has been idle for idle; each
	// that finds nothing doubles the next wait, from idle.
	var waits []time.Duration
	for _, wait := range []time.Duration{idle, idle, 2 * idle, 4 * idle, 8 * idle, 16 * idle, 16 * idle} {
		now = now.Add(wait - time.Second)
		if derived() {
			t.Fatalf("after %v: the job is looked at %v before its wait of %v is over (waits so far %v)", now.Sub(job.UpdatedAt), time.Second, wait, waits)
		}
		now = now.Add(time.Second)
		if !derived() {
			t.Fatalf("after %v: the job is not looked at once its wait of %v is over (waits so far %v)", now.Sub(job.UpdatedAt), wait, waits)
		}
		if n, err := r.repair(ctx); err != nil || n != 0 {
			t.Fatalf("repair: %d changed, %v; want nothing to repair", n, err)
		}
		waits = append(waits, wait)
	}
	if last := waits[len(waits)-1]; last != repairBackoffMax*idle {
		t.Fatalf("waits %v: want them capped at %v", waits, repairBackoffMax*idle)
	}
	// Its record changes (as the watch delivers it): looked at again one
	// idle period later.
	job.UpdatedAt = now
	r.jobs[job.ID] = job
	now = now.Add(idle)
	if !derived() {
		t.Fatal("a job whose record changed is still backed off")
	}
}

// TestRepairDecidesByTheRecordNotItsCopy: the sweep's copy of a job (from
// its watch) can lag the record. A copy that looks idle while the record
// was written a moment ago — a worker counting the job's last chunk right
// now — is not settled by the sweep: that worker finishes it. Once the
// record itself has been idle for the idle time, the sweep settles it.
func TestRepairDecidesByTheRecordNotItsCopy(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	js, stores := repairServer(t)
	job := kv.Job{Job: salvagetype.Job{ID: "01JREPAIRCOPY0000000000000", Pipeline: "p", Chunks: 1}}
	if err := stores.Jobs.Create(ctx, job); err != nil {
		t.Fatal(err)
	}
	if _, err := stores.Parts()[0].Checkpoints.Mutate(ctx, job.ID, 1, func(cp *kv.Checkpoint) error {
		cp.Status = salvagetype.ChunkDone
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	rec, err := stores.Jobs.Get(ctx, job.ID)
	if err != nil {
		t.Fatal(err)
	}
	const idle = 10 * time.Second
	r := newRepairer(js, stores, idle, zerolog.Nop())
	stale := rec
	stale.UpdatedAt = rec.UpdatedAt.Add(-time.Hour)
	r.jobs[job.ID] = stale
	now := rec.UpdatedAt.Add(time.Second)
	r.now = func() time.Time { return now }
	if n, err := r.repair(ctx); err != nil || n != 0 {
		t.Fatalf("repair with a stale copy of a record written 1s ago: %d changed, %v; want nothing", n, err)
	}
	if got, err := stores.Jobs.Get(ctx, job.ID); err != nil || got.Status != salvagetype.JobRunning || got.Finishes != 0 {
		t.Fatalf("job = %+v, %v: the sweep settled a job its record says is moving", got, err)
	}
	now = rec.UpdatedAt.Add(2 * idle)
	if n, err := r.repair(ctx); err != nil || n != 1 {
		t.Fatalf("repair once the record was idle for %v: %d changed, %v; want the job settled", 2*idle, n, err)
	}
	if got, err := stores.Jobs.Get(ctx, job.ID); err != nil || got.Status != salvagetype.JobDone || got.Finishes != 1 || got.AnnouncementOwed() {
		t.Fatalf("job = %+v, %v: want done, finished once and announced", got, err)
	}
}

// repairServer starts an embedded server for the repairer's tests and
// provisions the streams and stores.
func repairServer(t *testing.T) (jetstream.JetStream, *kv.Stores) {
	t.Helper()
	srv, err := natsconf.StartServer(natsconf.ServerConfig{Listen: "127.0.0.1:-1", StoreDir: t.TempDir(), ServerName: "repair-test"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Shutdown)
	nc, err := natsconf.Connect(natsconf.ConnectConfig{URL: srv.ClientURL(), Name: t.Name()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	if err := streams.Provision(t.Context(), js, streams.Options{}); err != nil {
		t.Fatal(err)
	}
	stores, err := kv.Provision(t.Context(), js, kv.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return js, stores
}

// TestRepairLeavesAJobWhoseChunkJustMoved: a chunk's count change rides in
// its checkpoint's write and reaches the job record right after. A sweep
// that settled the job in between — its record idle, its chunk's
// checkpoint just written — counted the chunk's 25 tokens, and the
// writer's count write then added them again: 75 of 50 in
// TestUsageSurvivesACrash. The sweep waits for the checkpoints too.
func TestRepairLeavesAJobWhoseChunkJustMoved(t *testing.T) {
	t.Parallel()
	js, stores := repairServer(t)
	ctx := t.Context()
	job := kv.Job{Job: salvagetype.Job{ID: "01JREPAIRMOVED000000000000", Pipeline: "p", Chunks: 1}}
	if err := stores.Jobs.Create(ctx, job); err != nil {
		t.Fatal(err)
	}
	rec, err := stores.Jobs.Get(ctx, job.ID)
	if err != nil {
		t.Fatal(err)
	}
	// The chunk finishes an hour after the record's last write.
	written := rec.UpdatedAt.Add(time.Hour)
	stores.Parts()[0].Checkpoints.SetClock(func() time.Time { return written })
	var d kv.Delta
	if _, err := stores.Parts()[0].Checkpoints.Mutate(ctx, job.ID, 1, func(cp *kv.Checkpoint) error {
		cp.Status, cp.CompletionTokens = salvagetype.ChunkDone, 25
		d = cp.Recount()
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	const idle = 10 * time.Second
	r := newRepairer(js, stores, idle, zerolog.Nop())
	r.jobs[job.ID] = rec
	now := written.Add(time.Second)
	r.now = func() time.Time { return now }
	if n, err := r.repair(ctx); err != nil || n != 0 {
		t.Fatalf("repair a second after the chunk's checkpoint moved: %d changed, %v; want nothing", n, err)
	}
	// The writer's count lands, as a worker's does after its checkpoint.
	if _, _, err := stores.Jobs.Apply(ctx, job.ID, d); err != nil {
		t.Fatal(err)
	}
	now = written.Add(2 * idle)
	if _, err := r.repair(ctx); err != nil {
		t.Fatal(err)
	}
	got, err := stores.Jobs.Get(ctx, job.ID)
	if err != nil || got.Status != salvagetype.JobDone || got.Summary.CompletionTokens != 25 || got.Summary.Done != 1 {
		t.Fatalf("job = %+v (%v); want done with its chunk's 25 tokens counted once", got, err)
	}
}
