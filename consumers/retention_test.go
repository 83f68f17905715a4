package consumers_test

import (
	"encoding/json"
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/oklog/ulid/v2"

	"github.com/salvagehq/salvage/consumers/deadletter"
	"github.com/salvagehq/salvage/consumers/operator"
	"github.com/salvagehq/salvage/kv"
	"github.com/salvagehq/salvage/recovery"
	"github.com/salvagehq/salvage/salvagetest"
	"github.com/salvagehq/salvage/salvagetype"
	"github.com/salvagehq/salvage/streams"
)

// startRetention runs a dead-letterer (and so retention) with keep.
func (b *bundle) startRetention(t *testing.T, keep salvagetype.Retention) {
	t.Helper()
	dl, err := deadletter.New(b.JS, b.stores, deadletter.Config{
		SweepInterval: 250 * time.Millisecond, UnknownPipelineWait: 250 * time.Millisecond, Retention: keep,
	})
	if err != nil {
		t.Fatal(err)
	}
	b.goRun(dl.Run)
}

// journalKeys returns the keys of chunk's journal rows that still have a
// value, by tool.
func (b *bundle) journalKeys(t *testing.T, job string, chunk int) map[string]int {
	t.Helper()
	rows, err := b.stores.Parts()[0].Journal.LoadChunk(b.ctx, job, chunk)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]int{}
	for _, r := range rows {
		out[r.Tool]++
	}
	return out
}

// journalMsgs counts the messages the journal stream holds for chunk:
// what its disk use is made of, markers included.
func (b *bundle) journalMsgs(t *testing.T, job string, chunk int) uint64 {
	t.Helper()
	s, err := b.JS.Stream(b.ctx, "KV_"+kv.BucketJournal)
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(b.ctx, jetstream.WithSubjectFilter("$KV."+kv.BucketJournal+"."+job+"."+strconv.Itoa(chunk)+".>"))
	if err != nil {
		t.Fatal(err)
	}
	var n uint64
	for _, c := range info.State.Subjects {
		n += c
	}
	return n
}

// TestRetentionByDataClass runs retention with short windows on real
// jobs: a job of pure calls loses its rows once finished; a shop job
// keeps a done order's side-effect rows until the effects' time, an
// abandoned order's whole record until the records' time, and an
// escalated (open) order's record whole, with its job, until a person
// resolves it; then everything goes.
func TestRetentionByDataClass(t *testing.T) {
	t.Parallel()
	s := newShop()
	b := setup(t, setupOpts{noDeadLetter: true, pipelines: []*recovery.Plan{s.pipeline(t)}})
	// Effect rows live 20 s from the job's finish: order A's are read
	// once A is retired, which on a loaded machine came more than the 5 s
	// they once had after the finish (CI: "order A's reserve row after
	// retention = <nil>": expired before they were read).
	keep := salvagetype.Retention{Calls: 2 * time.Second, Effects: 20 * time.Second, Records: 30 * time.Second}
	b.startRetention(t, keep)
	b.startWorker(t, "w1")
	b.startOrchestrator(t, "o1")

	pure := b.submit(t, modeOK, modeOK)
	b.waitJob(t, pure, salvagetype.JobDone)
	if n := b.journalKeys(t, pure, 1)["tool"]; n != 3 {
		t.Fatalf("chunk 1 of the pure job has %d rows before retention, want 3", n)
	}
	// Retention removes a chunk's rows, then retires its checkpoint:
	// both are waited for (under load the test once looked between them).
	salvagetest.Eventually(t, time.Minute, func() bool {
		return b.journalMsgs(t, pure, 1) == 0 && b.journalMsgs(t, pure, 2) == 0 && b.checkpoint(t, pure, 1).KeptUntil != nil
	}, "the pure job's journal to be removed and its chunk retired")
	if cp := b.checkpoint(t, pure, 1); cp.KeptUntil == nil || cp.Outputs != nil || cp.Status != salvagetype.ChunkDone {
		t.Errorf("the pure job's chunk 1 checkpoint = %s kept until %v, %d outputs; want done, kept until set, no outputs", cp.Status, cp.KeptUntil, len(cp.Outputs))
	}

	job := b.submitOrders(t, shopOrder{ID: "A"}, shopOrder{ID: "B", Fail: true}, shopOrder{ID: "C", Email: true, Fail: true})
	b.waitJob(t, job, salvagetype.JobIncomplete)
	b.envelopeOf(t, job, 2, func(r kv.EnvelopeRecord) bool { return r.Status == salvagetype.EnvelopeAbandoned }, "abandoned")
	escalated := b.envelopeOf(t, job, 3, func(r kv.EnvelopeRecord) bool { return r.Status == salvagetype.EnvelopeEscalated }, "escalated")
	open := b.journalKeys(t, job, 3)

	// Order A (done): side effects kept with their keys and outcomes.
	// Order B (abandoned): its whole record kept. Order C: untouched.
	// A's rows are read as soon as A is retired: they live the effects'
	// time from the job's finish, and B retires only after its
	// compensation, which on a loaded machine came more than 5 s after A
	// (CI: "chunk 1 has no reserve row", read once both were retired).
	var rowsA map[string]kv.StoredRow // every epoch's rows of chunk 1, by key
	salvagetest.Eventually(t, time.Minute, func() bool {
		if b.checkpoint(t, job, 1).KeptUntil == nil {
			return false
		}
		var err error
		rowsA, err = b.stores.Parts()[0].Journal.LoadChunk(b.ctx, job, 1)
		return err == nil
	}, "order A to be retired")
	byTool := map[string]int{}
	for _, r := range rowsA {
		byTool[r.Tool]++
	}
	for _, tool := range []string{"reserve", "charge"} {
		var found *kv.StoredRow
		for _, r := range rowsA {
			if r.Tool == tool && r.Epoch == 0 {
				found = &r
				break
			}
		}
		if found == nil || found.Status != salvagetype.CallSucceeded || found.IdempotencyKey == "" || found.Fingerprint == nil {
			t.Errorf("order A's %s row after retention = %+v, want its outcome and key", tool, found)
		}
	}
	if byTool["ship"] != 0 {
		t.Errorf("order A's journal after retention = %v, want its pure ship call removed", byTool)
	}
	salvagetest.Eventually(t, time.Minute, func() bool { return b.checkpoint(t, job, 2).KeptUntil != nil }, "order B to be retired")
	if got := b.journalKeys(t, job, 2); got["charge"] != 1 || got["ship"] != 1 {
		t.Errorf("order B's journal after retention = %v, want every call kept (the failed shipment too)", got)
	}
	if cp := b.checkpoint(t, job, 3); cp.KeptUntil != nil {
		t.Errorf("order C (envelope escalated, open) was retired: %+v", cp.KeptUntil)
	}
	if j := b.waitJob(t, job, salvagetype.JobIncomplete); j.KeptUntil != nil {
		t.Errorf("the job was retired while order C's envelope is open")
	}

	// Past the effects' time: A's rows expire, B's and C's stay.
	salvagetest.Eventually(t, time.Minute, func() bool { return b.journalMsgs(t, job, 1) == 0 }, "order A's side-effect rows to expire")
	if got := b.journalKeys(t, job, 2); len(got) == 0 {
		t.Errorf("order B's record expired with the side effects' time, want the records' time")
	}
	if got := b.journalKeys(t, job, 3); len(got) != len(open) {
		t.Errorf("order C's journal = %v, was %v: an open envelope's journal changed", got, open)
	}

	// Past the records' time, C is still whole; resolved, it goes too.
	// Its checkpoint was retired after its rows, so it goes a moment later.
	salvagetest.Eventually(t, time.Minute, func() bool {
		_, _, err := b.stores.Parts()[0].Checkpoints.Get(b.ctx, job, 2)
		return b.journalMsgs(t, job, 2) == 0 && errors.Is(err, kv.ErrNotFound)
	}, "order B's record (journal and checkpoint) to expire")
	if got := b.journalKeys(t, job, 3); len(got) != len(open) || b.checkpoint(t, job, 3).KeptUntil != nil {
		t.Fatalf("order C's record changed while its envelope was open: %v, was %v", got, open)
	}
	if _, err := operator.New(b.JS, b.stores).Resolve(b.ctx, escalated.ID, "ops@example.com", "email apologised for"); err != nil {
		t.Fatal(err)
	}
	var last kv.Job
	salvagetest.Eventually(t, time.Minute, func() bool {
		var err error
		last, err = b.stores.Jobs.Get(b.ctx, job)
		return errors.Is(err, kv.ErrNotFound) && b.journalMsgs(t, job, 3) == 0
	}, "the job and order C's record to expire once C was resolved (job: %+v)", &last)
}

// TestRetentionLeavesLiveWork: a finished event for a job that runs
// again leaves it alone; in a finished job, a held chunk and a chunk
// whose envelope is open keep everything, while the done chunk beside
// them is retired.
func TestRetentionLeavesLiveWork(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{noDeadLetter: true})
	b.startRetention(t, salvagetype.Retention{Calls: time.Millisecond, Effects: time.Hour, Records: time.Hour})

	running, finished := ulid.Make().String(), ulid.Make().String()
	now := time.Now().UTC()
	// The running job's chunk 2 has not run: nothing (the repairer
	// settling a job idle for a while on a loaded machine) can finish it,
	// and its done chunk 1 would be retired if retention looked at it.
	if err := b.stores.Jobs.Create(b.ctx, kv.Job{Job: salvagetype.Job{ID: running, Pipeline: "test", Chunks: 2}}); err != nil {
		t.Fatal(err)
	}
	if err := b.stores.Jobs.Create(b.ctx, kv.Job{Job: salvagetype.Job{ID: finished, Pipeline: "test", Chunks: 3, Status: salvagetype.JobIncomplete, FinishedAt: &now}}); err != nil {
		t.Fatal(err)
	}
	env := ulid.Make().String()
	if err := b.stores.Envelopes.Put(b.ctx, kv.EnvelopeRecord{EnvelopeRecord: salvagetype.EnvelopeRecord{ID: env, Job: finished, Chunk: 3, Status: salvagetype.EnvelopeOpen}}); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		job    string
		chunk  int
		status salvagetype.ChunkStatus
	}{{running, 1, salvagetype.ChunkDone}, {finished, 1, salvagetype.ChunkDone}, {finished, 2, salvagetype.ChunkHeld}, {finished, 3, salvagetype.ChunkDeadLettered}} {
		if _, err := b.stores.Parts()[0].Checkpoints.Mutate(b.ctx, c.job, c.chunk, func(cp *kv.Checkpoint) error {
			cp.Status = c.status
			if c.status == salvagetype.ChunkDeadLettered {
				cp.Envelope = env
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		for seq := range 2 {
			row := kv.JournalRow{Call: salvagetype.Call{Key: kv.JournalKey(c.job, c.chunk, 0, 1, "a", seq), Job: c.job, Chunk: c.chunk, Tool: "model", Status: salvagetype.CallSucceeded}}
			if _, err := b.stores.Parts()[0].Journal.Put(b.ctx, row, 0); err != nil {
				t.Fatal(err)
			}
		}
	}
	for _, id := range []string{running, finished} {
		ev, _ := json.Marshal(salvagetype.JobEvent{Job: id, Kind: streams.EventFinished, At: now})
		if _, err := b.JS.Publish(b.ctx, streams.JobRef{Job: id}.Event(streams.EventFinished), ev); err != nil {
			t.Fatal(err)
		}
	}
	salvagetest.Eventually(t, time.Minute, func() bool { return b.journalMsgs(t, finished, 1) == 0 }, "the finished job's done chunk to be retired")
	// The same pass looked at the held chunk and the open envelope's.
	for _, c := range []struct {
		job   string
		chunk int
	}{{running, 1}, {finished, 2}, {finished, 3}} {
		if n := b.journalMsgs(t, c.job, c.chunk); n != 2 {
			t.Errorf("job %s chunk %d has %d journal messages, want its 2 rows untouched", c.job, c.chunk, n)
		}
		if cp := b.checkpoint(t, c.job, c.chunk); cp.KeptUntil != nil {
			t.Errorf("job %s chunk %d (%s) was retired", c.job, c.chunk, cp.Status)
		}
	}
	for _, id := range []string{running, finished} {
		if j, err := b.stores.Jobs.Get(b.ctx, id); err != nil || j.KeptUntil != nil {
			t.Errorf("job %s: %v, kept until %v; want it kept, no expiry", id, err, j.KeptUntil)
		}
	}
}

// TestARetiredChunkThatRunsAgainKeepsItsJournal: retention retired a
// dead-lettered chunk whose envelope settled (its rows now expire); a
// replay runs it again, and the worker takes the rows' TTLs back before
// it runs, in every epoch, so nothing the running chunk reads expires.
func TestARetiredChunkThatRunsAgainKeepsItsJournal(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{noDeadLetter: true})
	b.startRetention(t, salvagetype.Retention{Calls: 3 * time.Second, Effects: time.Hour, Records: time.Hour})

	job, env := ulid.Make().String(), ulid.Make().String()
	now := time.Now().UTC()
	if err := b.stores.Jobs.Create(b.ctx, kv.Job{Job: salvagetype.Job{ID: job, Pipeline: "test", Chunks: 1, Status: salvagetype.JobIncomplete, FinishedAt: &now}}); err != nil {
		t.Fatal(err)
	}
	if err := b.stores.Envelopes.Put(b.ctx, kv.EnvelopeRecord{EnvelopeRecord: salvagetype.EnvelopeRecord{ID: env, Job: job, Chunk: 1, Status: salvagetype.EnvelopeDeadEnd}}); err != nil {
		t.Fatal(err)
	}
	// It last ran from an earlier message (one of a pipeline nobody runs
	// stands in for it): the message that runs it again is another one.
	earlier := publishChunk(t, b, "idle", job, "")
	if _, err := b.stores.Parts()[0].Checkpoints.Mutate(b.ctx, job, 1, func(cp *kv.Checkpoint) error {
		cp.Status, cp.Envelope, cp.Stage, cp.MsgSeq = salvagetype.ChunkDeadLettered, env, 1, earlier
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	for _, epoch := range []int{0, 1} {
		row := kv.JournalRow{Call: salvagetype.Call{Key: kv.JournalKey(job, 1, epoch, 1, "earlier", 0), Job: job, Chunk: 1, Epoch: epoch, Tool: "model", Status: salvagetype.CallSucceeded}}
		if _, err := b.stores.Parts()[0].Journal.Put(b.ctx, row, 0); err != nil {
			t.Fatal(err)
		}
	}
	ev, _ := json.Marshal(salvagetype.JobEvent{Job: job, Kind: streams.EventFinished, At: now})
	if _, err := b.JS.Publish(b.ctx, streams.JobRef{Job: job}.Event(streams.EventFinished), ev); err != nil {
		t.Fatal(err)
	}
	expiring := func() int {
		rows, err := b.stores.Parts()[0].Journal.LoadChunk(b.ctx, job, 1)
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, r := range rows {
			if r.Expires {
				n++
			}
		}
		return n
	}
	salvagetest.Eventually(t, time.Minute, func() bool { return b.checkpoint(t, job, 1).KeptUntil != nil && expiring() == 2 },
		"the settled chunk to be retired, its rows given a TTL")

	b.startWorker(t, "w1")
	publishChunk(t, b, "test", job, "")
	var last kv.Checkpoint
	salvagetest.Eventually(t, time.Minute, func() bool {
		last = b.checkpoint(t, job, 1)
		return last.Status == salvagetype.ChunkDone
	}, "the chunk to run again (last %+v)", &last)
	if n := expiring(); n != 0 {
		t.Errorf("%d journal rows of the chunk that ran again still expire", n)
	}
	if cp := b.checkpoint(t, job, 1); cp.KeptUntil != nil {
		t.Errorf("the chunk that ran again still says kept until %v", cp.KeptUntil)
	}
}
