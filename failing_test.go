package salvage_test

import (
	"encoding/json"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/salvagehq/salvage"
	"github.com/salvagehq/salvage/kv"
	"github.com/salvagehq/salvage/salvagetest"
	"github.com/salvagehq/salvage/salvagetype"
)

// NeedingAttention lists the chunks that need a person or are not
// finished, most urgent first; a done chunk is never among them, whatever
// it went through (it listed every chunk that ever met an open breaker).
func TestNeedingAttentionListsOnlyWhatNeedsSomeone(t *testing.T) {
	t.Parallel()
	chunks := []salvage.Chunk{
		{Chunk: 1, Status: salvage.ChunkDone, LastError: "breaker open", Holds: 2},
		{Chunk: 2, Status: salvage.ChunkDone, Envelope: "E-resolved"},
		{Chunk: 3, Status: salvage.ChunkRunning, LastError: "503"},
		{Chunk: 4, Status: salvage.ChunkHeld},
		{Chunk: 5, Status: salvage.ChunkDeadLettered, Envelope: "E5"},
		{Chunk: 6, Status: "cancelled-at-stage-2", Envelope: "E6"},
		{Chunk: 7, Status: "cancelled-at-stage-0"},
		{Chunk: 8, Status: salvage.ChunkPending},
		{Chunk: 9, Status: salvage.ChunkPaused},
		{Chunk: 10, Status: salvage.ChunkAwaitingApproval},
	}
	var got []int
	for _, c := range salvage.NeedingAttention(chunks) {
		got = append(got, c.Chunk)
	}
	if want := []int{5, 4, 9, 10, 6, 3}; !slices.Equal(got, want) {
		t.Fatalf("needing attention %v; want %v", got, want)
	}
}

// The failed filter of a 10,000-chunk job reads the checkpoints of the
// chunks that failed or wait, not the job's: the checkpoint reads it makes
// (every direct get on the bucket, seen on the wire) name at most the
// chunks its attention index names (four, and one that waited once), and
// it lists what a read of every chunk would. A job written before the index (no entries, not marked) is read
// whole, and answers the same way. The service answers jobs.failing with
// what the client reads.
func TestFailingReadsOnlyTheChunksThatFailed(t *testing.T) {
	t.Parallel()
	srv := salvagetest.StartServer(t)
	c := srv.Client(t, &salvage.Config{Pipelines: []*salvage.Pipeline{words()}, Roles: []salvage.Role{salvage.RoleAPI}})
	ctx := t.Context()
	st, err := kv.Open(ctx, srv.JS)
	if err != nil {
		t.Fatal(err)
	}
	const big = 10_000
	if err := st.Jobs.Create(ctx, kv.Job{Job: salvagetype.Job{ID: "big", Pipeline: "words", Chunks: big}}); err != nil {
		t.Fatal(err)
	}
	set := func(job string, chunk int, fn func(*kv.Checkpoint)) {
		t.Helper()
		if _, err := st.Parts()[0].Checkpoints.Mutate(ctx, job, chunk, func(cp *kv.Checkpoint) error { fn(cp); return nil }); err != nil {
			t.Fatal(err)
		}
	}
	failing := map[int]func(*kv.Checkpoint){
		9_999: func(cp *kv.Checkpoint) { cp.Status, cp.Envelope = salvagetype.ChunkDeadLettered, "E9999" },
		17:    func(cp *kv.Checkpoint) { cp.Status, cp.HeldOn = salvagetype.ChunkHeld, "payments" },
		5_000: func(cp *kv.Checkpoint) { cp.Status, cp.LastError = salvagetype.ChunkRunning, "503" },
		42:    func(cp *kv.Checkpoint) { cp.Status, cp.Envelope = salvagetype.CancelledAtStage(2), "E42" },
	}
	for chunk, fn := range failing {
		set("big", chunk, fn)
	}
	for chunk := 1; chunk <= 300; chunk++ {
		if failing[chunk] == nil {
			set("big", chunk, func(cp *kv.Checkpoint) { cp.Status = salvagetype.ChunkDone })
		}
	}
	// Chunk 3 was held and then finished: it needs nobody now, but its
	// entry stays (the reader drops it).
	set("big", 3, func(cp *kv.Checkpoint) { cp.Status = salvagetype.ChunkHeld })
	set("big", 3, func(cp *kv.Checkpoint) { cp.Status = salvagetype.ChunkDone })

	// A job of before the index: its record and checkpoints written as an
	// older process wrote them, with no entry.
	const old = 3_000
	putJSON := func(bucket, key string, v any) {
		t.Helper()
		b, err := srv.JS.KeyValue(ctx, bucket)
		if err != nil {
			t.Fatal(err)
		}
		data, _ := json.Marshal(v)
		if _, err := b.Put(ctx, key, data); err != nil {
			t.Fatal(err)
		}
	}
	putJSON(kv.BucketJobs, "old", kv.Job{Job: salvagetype.Job{ID: "old", Pipeline: "words", Chunks: old, Status: salvagetype.JobRunning}})
	putJSON(kv.BucketCheckpoints, kv.ChunkKey("old", 2_999), salvagetype.Chunk{Job: "old", Chunk: 2_999, Stage: 1, Status: salvagetype.ChunkDeadLettered, Envelope: "E-old"})

	// The sniffers share the client's connection: the server hands them
	// every checkpoint read it sends, in order, before the answer to a
	// later flush.
	var sniffers []*nats.Subscription
	for _, subject := range []string{"$JS.API.DIRECT.GET.KV_salvage_checkpoints", "$JS.API.DIRECT.GET.KV_salvage_checkpoints.>"} {
		sub, err := srv.Conn.SubscribeSync(subject)
		if err != nil {
			t.Fatal(err)
		}
		if err := sub.SetPendingLimits(-1, -1); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = sub.Unsubscribe() })
		sniffers = append(sniffers, sub)
	}
	if err := srv.Conn.Flush(); err != nil {
		t.Fatal(err)
	}
	// reads counts the checkpoints asked for since it last ran.
	reads := func() int {
		if err := srv.Conn.Flush(); err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, sub := range sniffers {
			for {
				msgs, _, err := sub.Pending()
				if err != nil {
					t.Fatal(err)
				}
				if msgs == 0 {
					break
				}
				m, err := sub.NextMsg(time.Minute)
				if err != nil {
					t.Fatal(err)
				}
				var req struct {
					MultiLast []string `json:"multi_last"`
				}
				_ = json.Unmarshal(m.Data, &req)
				n += max(len(req.MultiLast), 1)
			}
		}
		return n
	}
	// every is what a read of every chunk keeps.
	every := func(job string) []int {
		t.Helper()
		var all []salvage.Chunk
		for p := (&salvage.Page{Limit: salvage.PageMax}); ; {
			st, err := c.ChunkList(ctx, job, p)
			if err != nil {
				t.Fatal(err)
			}
			all = append(all, st.Chunks...)
			if st.NextOffset == 0 {
				break
			}
			p.Offset = st.NextOffset
		}
		var out []int
		for _, ch := range salvage.NeedingAttention(all) {
			out = append(out, ch.Chunk)
		}
		return out
	}
	numbers := func(chunks []salvage.Chunk) []int {
		var out []int
		for _, ch := range chunks {
			out = append(out, ch.Chunk)
		}
		return out
	}

	reads()
	first, err := c.ChunkListFailing(ctx, "big", &salvage.Page{Limit: 2})
	if err != nil {
		t.Fatal(err)
	}
	if n, flagged := reads(), len(failing)+1; n > flagged {
		t.Fatalf("the failed filter of a %d-chunk job read %d checkpoints; want at most the %d that ever failed or waited", big, n, flagged)
	}
	rest, err := c.ChunkListFailing(ctx, "big", &salvage.Page{Offset: first.NextOffset, Limit: 2})
	if err != nil {
		t.Fatal(err)
	}
	got := append(numbers(first.Chunks), numbers(rest.Chunks)...)
	if want := []int{9_999, 17, 42, 5_000}; !slices.Equal(got, want) || first.Matched != 4 || first.NextOffset != 2 || rest.NextOffset != 0 || first.Job.Chunks != big {
		t.Fatalf("failing pages %v (matched %d, next %d, %d); want %v in two pages", got, first.Matched, first.NextOffset, rest.NextOffset, want)
	}
	if want := every("big"); !slices.Equal(got, want) {
		t.Fatalf("failing %v; a read of every chunk keeps %v", got, want)
	}

	reads()
	before, err := c.ChunkListFailing(ctx, "old", nil)
	if err != nil {
		t.Fatal(err)
	}
	if n := reads(); n != old {
		t.Fatalf("the failed filter of a job of before the index read %d checkpoints; want all %d", n, old)
	}
	if got := numbers(before.Chunks); !slices.Equal(got, []int{2_999}) || !slices.Equal(got, every("old")) {
		t.Fatalf("failing of a job of before the index: %v", got)
	}

	reply, err := srv.Conn.RequestWithContext(ctx, "salvage.api.jobs.failing", []byte(`{"job_id":"big","limit":2}`))
	if err != nil {
		t.Fatal(err)
	}
	want, _ := json.Marshal(first)
	if string(reply.Data) != string(want) {
		t.Fatalf("jobs.failing answered\n%s\nwant\n%s", reply.Data, want)
	}
	if _, err := c.ChunkListFailing(ctx, "no-such-job", nil); !errors.Is(err, salvage.ErrUnknownJob) {
		t.Fatalf("failing of an unknown job: %v", err)
	}
}
