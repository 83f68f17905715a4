package consumers_test

import (
	"context"
	"encoding/json"
	"errors"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/salvagehq/salvage/consumers/splitter"
	"github.com/salvagehq/salvage/kv"
	"github.com/salvagehq/salvage/salvagetest"
	"github.com/salvagehq/salvage/salvagetype"
	"github.com/salvagehq/salvage/streams"
)

func TestBadInputIsRejectedAndServiceKeepsServing(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{})
	rejected := b.subscribe(t, "salvage.events.rejected.>")
	b.startWorker(t, "w1")
	tests := []struct {
		subject, body string
		reason        salvagetype.RejectReason
	}{
		{"salvage.jobs.test", `{"input": {"chunks": [`, salvagetype.RejectMalformedJSON},
		{"salvage.jobs.test", `{"input": {}} trailing`, salvagetype.RejectMalformedJSON},
		// Two job ids (or two inputs): the last won, silently.
		{"salvage.jobs.test", `{"job_id": "a", "input": {"chunks": ["ok"]}, "job_id": "b"}`, salvagetype.RejectMalformedJSON},
		{"salvage.jobs.nope", `{"input": {"chunks": ["ok"]}}`, salvagetype.RejectUnknownPipeline},
		{"salvage.jobs.test", `{"input": {"chunks": ["` + strings.Repeat("x", 5000) + `"]}}`, salvagetype.RejectOversized},
		{"salvage.jobs.test", `{"job_id": "a.b", "input": {"chunks": ["ok"]}}`, salvagetype.RejectBadToken},
		{"salvage.jobs.test", `{"job_id": "a*", "input": {"chunks": ["ok"]}}`, salvagetype.RejectBadToken},
		// Valid subject tokens but not KV keys: they used to loop forever
		// on "nats: invalid key".
		{"salvage.jobs.test", `{"job_id": "job#1", "input": {"chunks": ["ok"]}}`, salvagetype.RejectBadToken},
		{"salvage.jobs.test", `{"job_id": "jöb", "input": {"chunks": ["ok"]}}`, salvagetype.RejectBadToken},
		{"salvage.jobs.test", `{"job_id": "a:b", "input": {"chunks": ["ok"]}}`, salvagetype.RejectBadToken},
		{"salvage.jobs.test", `{"job_id": "", "input": {"chunks": ["ok"]}}`, salvagetype.RejectBadToken},
		{"salvage.jobs.test", `{"job_id": "rejected", "input": {"chunks": ["ok"]}}`, salvagetype.RejectBadToken},
		{"salvage.jobs.test.extra", `{"input": {"chunks": ["ok"]}}`, salvagetype.RejectBadSubject},
		{"salvage.jobs.test", `{"input": {"chunks": []}}`, salvagetype.RejectBadInput},
		{"salvage.jobs.test", `{"metadata": {}}`, salvagetype.RejectBadInput},
		{"salvage.jobs.test", `{"input": "not an object"}`, salvagetype.RejectBadInput},
	}
	for _, tt := range tests {
		if _, err := b.JS.Publish(b.ctx, tt.subject, []byte(tt.body)); err != nil {
			t.Fatal(err)
		}
	}
	salvagetest.Eventually(t, time.Minute, func() bool { return len(rejected()) == len(tests) }, "%d rejections", len(tests))
	// The splitter of a pipeline rejects its jobs in order; a subject no
	// splitter takes (an unknown pipeline, a bad shape) is rejected by the
	// sweeper's intake: match each by its message.
	bySeq := map[uint64]salvagetype.Rejection{}
	for _, m := range rejected() {
		var r salvagetype.Rejection
		if err := json.Unmarshal(m.Data, &r); err != nil {
			t.Fatal(err)
		}
		if m.Subject != streams.RejectedSubject(r.Reason) || m.Header.Get(salvagetype.HeaderReason) != string(r.Reason) || r.Error == "" {
			t.Errorf("rejection %+v on %s with header %q", r, m.Subject, m.Header.Get(salvagetype.HeaderReason))
		}
		bySeq[r.StreamSeq] = r
	}
	for i, want := range tests {
		r, ok := bySeq[uint64(i+1)]
		if !ok || r.Reason != want.reason || r.Subject != want.subject {
			t.Errorf("message %d (%s): rejection %+v, want reason %s", i+1, want.subject, r, want.reason)
		}
		if want.reason != salvagetype.RejectOversized && r.Data != want.body {
			t.Errorf("message %d: rejection lost the payload: %q", i+1, r.Data)
		}
	}
	if jobs, _ := b.stores.Jobs.List(b.ctx); len(jobs) != 0 {
		t.Errorf("bad input created %d jobs", len(jobs))
	}
	// Still serving.
	b.waitJob(t, b.submit(t, modeOK), salvagetype.JobDone)
	salvagetest.Eventually(t, time.Minute, func() bool { return b.streamMsgs(t, streams.Jobs) == 0 }, "rejected messages removed")
}

// TestSplitterCrashRedeliveryMakesOneJob: the splitter dies right after
// publishing the job's chunks, before its record exists. No record
// promises chunks that were never published; a worker holds the chunks
// until the redelivered job message (no job_id, no Nats-Msg-Id: the id
// derives from the stream sequence) creates the one record, and the
// republished chunks are dropped as duplicates.
func TestSplitterCrashRedeliveryMakesOneJob(t *testing.T) {
	t.Parallel()
	b2 := setupNoSplitter(t)
	reg := b2.reg
	crashed := make(chan struct{})
	var publishes atomic.Int32
	sp, err := splitter.New(b2.JS, b2.stores, splitter.Config{Registry: reg})
	if err != nil {
		t.Fatal(err)
	}
	sp.Hooks().AfterPublish = func() {
		if publishes.Add(1) == 1 {
			close(crashed)
			runtime.Goexit() // the splitter dies here: no record, no ack
		}
	}
	go func() { _ = sp.Run(b2.ctx) }()
	in, _ := json.Marshal(map[string]any{"input": map[string]any{"chunks": []string{modeOK, modeOK}}})
	accepted := b2.subscribe(t, "salvage.events.*.accepted")
	if _, err := b2.JS.Publish(b2.ctx, streams.Pipeline("test").Subject(), in); err != nil {
		t.Fatal(err)
	}
	<-crashed
	if jobs, err := b2.stores.Jobs.List(b2.ctx); err != nil || len(jobs) != 0 {
		t.Fatalf("after the crash: %d job records (%v), want none yet", len(jobs), err)
	}
	if n := b2.streamMsgs(t, streams.Chunks); n != 2 {
		t.Fatalf("%d chunk messages after the crash, want both", n)
	}
	// A worker meets the chunks before any record exists: it waits.
	b2.startWorker(t, "w1")
	sp2, _ := splitter.New(b2.JS, b2.stores, splitter.Config{Registry: reg})
	b2.goRun(sp2.Run)
	var jobs []kv.Job
	salvagetest.Eventually(t, time.Minute, func() bool {
		jobs, _ = b2.stores.Jobs.List(b2.ctx)
		return len(jobs) == 1
	}, "the redelivered job message to create the job")
	j := b2.waitJob(t, jobs[0].ID, salvagetype.JobDone)
	if all, _ := b2.stores.Jobs.List(b2.ctx); len(all) != 1 || j.Summary.Done != 2 || len(b2.dlq(t)) != 0 {
		t.Fatalf("%d jobs after redelivery (want 1), summary %+v, %d envelopes", len(all), j.Summary, len(b2.dlq(t)))
	}
	salvagetest.Eventually(t, time.Minute, func() bool { return len(accepted()) == 1 }, "one accepted event")
	var ev salvagetype.JobEvent
	_ = json.Unmarshal(accepted()[0].Data, &ev)
	if ev.Job != jobs[0].ID {
		t.Fatalf("accepted event names job %s, want %s", ev.Job, jobs[0].ID)
	}
	for c := 1; c <= 2; c++ {
		if n := callCount(ev.Job, c, 1); n != 1 {
			t.Errorf("chunk %d ran stage 1 %d times: a republished chunk ran again", c, n)
		}
	}
}

func setupNoSplitter(t *testing.T) *bundle {
	t.Helper()
	nb := salvagetest.StartServer(t)
	opts := streams.Options{AckWait: 2 * time.Second, MaxDeliver: 3, SplitterAckWait: time.Second}
	ctx, cancel := context.WithCancel(context.Background())
	if err := streams.Provision(ctx, nb.JS, opts); err != nil {
		t.Fatal(err)
	}
	stores, err := kv.Provision(ctx, nb.JS, kv.Options{})
	if err != nil {
		t.Fatal(err)
	}
	b := &bundle{Server: nb, stores: stores, opts: opts, ctx: ctx, wg: new(sync.WaitGroup)}
	b.reg = mustRegistry(t)
	if err := provisionPipelines(ctx, nb.JS, b.reg.Names(), opts); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cancel(); b.wg.Wait() })
	return b
}

func TestSubmitWithMsgIDKeepsThatID(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{})
	id := "01JABCDEFGHJKMNPQRSTVWXYZ0"
	m := nats.NewMsg(streams.Pipeline("test").Subject())
	m.Header.Set(salvagetype.HeaderMsgID, id)
	m.Data = []byte(`{"input": {"chunks": ["ok"]}}`)
	if _, err := b.JS.PublishMsg(b.ctx, m); err != nil {
		t.Fatal(err)
	}
	salvagetest.Eventually(t, time.Minute, func() bool {
		_, err := b.stores.Jobs.Get(b.ctx, id)
		return err == nil
	}, "job with the Nats-Msg-Id ULID")
	if _, err := b.stores.Jobs.Get(b.ctx, "nope"); !errors.Is(err, kv.ErrNotFound) {
		t.Fatalf("unknown job: %v", err)
	}
}
