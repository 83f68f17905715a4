package salvage_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/oklog/ulid/v2"

	"github.com/salvagehq/salvage"
	"github.com/salvagehq/salvage/salvagetest"
)

// TestCancellingAFinishedJobIsRefused is the cancel of issue 33: an
// incomplete job (one chunk done, one dead-lettered) cancelled answered
// "cancelled" while its status stayed incomplete, and from then on every
// replay of its envelopes was refused. Now the cancel is refused
// (ErrJobFinished), the job is as it was, and its envelope replays.
func TestCancellingAFinishedJobIsRefused(t *testing.T) {
	t.Parallel()
	srv := salvagetest.StartServer(t)
	c := srv.Client(t, &salvage.Config{Pipelines: []*salvage.Pipeline{words()}})
	ctx := context.Background()
	id, err := c.JobSubmit(ctx, "words", map[string]any{"words": []string{"fine", "panic"}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if j := salvagetest.WaitJob(t, c, id, time.Minute); j.Status != salvage.JobIncomplete {
		t.Fatalf("job %s", j.Status)
	}
	envs := settled(t, srv, c, id, time.Minute)
	// Asked first, the server says the same: no cancel, a replay.
	if a, err := c.JobActionsOf(ctx, id); err != nil || a.Cancel.Allowed || !strings.Contains(a.Cancel.Reason, "finished") || !a.ReplayFailed.Allowed {
		t.Fatalf("the job's actions: %+v, %v", a, err)
	}
	if _, err := c.JobCancel(ctx, id, "ann"); !errors.Is(err, salvage.ErrJobFinished) {
		t.Fatalf("cancel of an incomplete job: %v", err)
	}
	if j, err := c.JobGet(ctx, id); err != nil || j.Status != salvage.JobIncomplete || j.CancelledAt != nil {
		t.Fatalf("after the refused cancel: %+v, %v", j, err)
	}
	if _, err := c.EnvelopeReplay(ctx, envs[0].ID, "ann"); err != nil {
		t.Fatalf("replay after the refused cancel: %v", err)
	}
}

// TestAPipelineNobodyRecoversIsSeen is the unseen work of issue 33: a
// fleet whose processes run a pipeline's workers but none its recovery
// leaves its envelopes open, and said so nowhere. Now salvage pipelines
// (Pipelines) counts the processes that recover each pipeline, and the
// alerter raises no-recovery while its envelopes wait; a recovery process
// started then settles them.
func TestAPipelineNobodyRecoversIsSeen(t *testing.T) {
	t.Parallel()
	srv := salvagetest.StartServer(t)
	ctx := context.Background()
	alerts, err := srv.Conn.SubscribeSync("salvage.alerts.no-recovery")
	if err != nil {
		t.Fatal(err)
	}
	c := srv.Client(t, &salvage.Config{Pipelines: []*salvage.Pipeline{words()}, AlertInterval: 100 * time.Millisecond,
		Roles: []salvage.Role{salvage.RoleWorker, salvage.RoleDeadLetter}})
	id, err := c.JobSubmit(ctx, "words", map[string]any{"words": []string{"panic"}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	salvagetest.WaitJob(t, c, id, time.Minute)
	if m, err := alerts.NextMsg(30 * time.Second); err != nil || !strings.Contains(string(m.Data), "words") {
		t.Fatalf("no no-recovery alert: %v", err)
	}
	var ps []salvage.PipelineStatus
	salvagetest.Eventually(t, time.Minute, func() bool {
		ps, err = c.PipelineList(ctx)
		return err == nil && len(ps) == 1 && ps[0].Workers == 1
	}, "the worker's heartbeat")
	if ps[0].Recovery != 0 {
		t.Fatalf("pipelines: %+v", ps)
	}
	srv.Client(t, &salvage.Config{Pipelines: []*salvage.Pipeline{words()}, Roles: []salvage.Role{salvage.RoleRecovery}})
	settled(t, srv, c, id, time.Minute)
	salvagetest.Eventually(t, time.Minute, func() bool {
		ps, err = c.PipelineList(ctx)
		return err == nil && len(ps) == 1 && ps[0].Recovery == 1
	}, "the recovery process to be counted (last %+v)", &ps)
}

// TestWaitReturnsOnceEnvelopesAreDecided is the listing of issue 33: right
// after Wait returned, some envelopes of the job were open and others a
// dead end for the same cause. Wait now returns once its recovery decided
// them all.
func TestWaitReturnsOnceEnvelopesAreDecided(t *testing.T) {
	t.Parallel()
	srv := salvagetest.StartServer(t)
	c := srv.Client(t, &salvage.Config{Pipelines: []*salvage.Pipeline{words()}})
	ctx := context.Background()
	id, err := c.JobSubmit(ctx, "words", map[string]any{"words": []string{"panic", "fine", "panic", "panic", "panic"}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	j, err := c.JobWait(ctx, id)
	if err != nil || j.Status != salvage.JobIncomplete {
		t.Fatalf("wait: %+v, %v", j, err)
	}
	list, err := c.EnvelopeList(ctx, salvage.EnvelopeFilter{Job: id}, nil)
	if err != nil || len(list.Envelopes) != 4 {
		t.Fatalf("envelopes: %+v, %v", list, err)
	}
	for _, e := range list.Envelopes {
		if e.Status != salvage.EnvelopeDeadEnd {
			t.Fatalf("right after Wait, envelope of chunk %d is %s; want dead-end like the others", e.Chunk, e.Status)
		}
	}
}

// TestAReusedMsgIDIsRejectedWithAnEvent is the lost job of issue 33: two
// job messages with different inputs under one Nats-Msg-Id — the server
// dropped the second for its two-minute dedup window, and nothing said
// so. SALVAGE_JOBS now keeps the server's least window (100 ms): past it
// the second reaches the splitter and is rejected duplicate-job (a job id
// names one input), with its event; the same input again is the same job.
func TestAReusedMsgIDIsRejectedWithAnEvent(t *testing.T) {
	t.Parallel()
	srv := salvagetest.StartServer(t)
	c := srv.Client(t, &salvage.Config{Pipelines: []*salvage.Pipeline{words()}})
	ctx := context.Background()
	rejected, err := srv.Conn.SubscribeSync("salvage.events.rejected.duplicate-job")
	if err != nil {
		t.Fatal(err)
	}
	id := ulid.Make().String()
	for _, word := range []string{"first", "second", "first"} {
		m := nats.NewMsg("salvage.jobs.words")
		m.Header.Set("Nats-Msg-Id", id)
		m.Data = []byte(`{"input": {"words": ["` + word + `"]}}`)
		// Within the window the server answers "duplicate" (the
		// publisher is told); the message after it is stored.
		salvagetest.Eventually(t, time.Minute, func() bool {
			ack, err := srv.JS.PublishMsg(ctx, m)
			return err == nil && !ack.Duplicate
		}, "the %s message to be stored", word)
	}
	ev, err := rejected.NextMsg(30 * time.Second)
	if err != nil || !strings.Contains(string(ev.Data), id) {
		t.Fatalf("no duplicate-job event for the second input: %v", err)
	}
	j := salvagetest.WaitJob(t, c, id, time.Minute)
	if j.Status != salvage.JobDone || j.Chunks != 1 {
		t.Fatalf("job %+v", j)
	}
	if extra, err := rejected.NextMsg(2 * time.Second); err == nil {
		t.Fatalf("the same input again was rejected too: %s", extra.Data)
	}
}

// TestHealthTellsAStalledProcess is the full disk of issue 33: a process
// whose writes fail dropped out of salvage workers while /healthz said ok.
// Its heartbeat failing (here: its bucket deleted under it) makes Health
// say ErrStalled and why.
func TestHealthTellsAStalledProcess(t *testing.T) {
	t.Parallel()
	srv := salvagetest.StartServer(t)
	c := srv.Client(t, &salvage.Config{Pipelines: []*salvage.Pipeline{words()}})
	ctx := context.Background()
	salvagetest.Eventually(t, time.Minute, func() bool { return c.Health(ctx) == nil }, "the process to be healthy")
	if err := srv.JS.DeleteKeyValue(ctx, "salvage_workers"); err != nil {
		t.Fatal(err)
	}
	var err error
	salvagetest.Eventually(t, 60*time.Second, func() bool {
		err = c.Health(ctx)
		return errors.Is(err, salvage.ErrStalled)
	}, "Health to say the process stalled (last: %v)", &err)
	if !strings.Contains(err.Error(), "heartbeat") {
		t.Fatalf("health: %v", err)
	}
}

// TestAClaimOfNoLiveProcessHoldsNothing: a claim is believed only while
// its holder's process lives (salvage_workers has its record). Here one
// is forged every 100 ms for a holder that never ran, each time with an
// expiry in 2099 — fresh enough that its write vouches for it — and the
// chunk still runs: the worker takes it from a holder with no record,
// and takes it back from each rewrite at its next renewal.
func TestAClaimOfNoLiveProcessHoldsNothing(t *testing.T) {
	t.Parallel()
	srv := salvagetest.StartServer(t)
	ctx := context.Background()
	id := ulid.Make().String()
	c := srv.Client(t, &salvage.Config{Pipelines: []*salvage.Pipeline{words()}, Roles: []salvage.Role{salvage.RoleNone}})
	claims, err := srv.JS.KeyValue(ctx, "salvage_claims")
	if err != nil {
		// The buckets exist once a client provisioned them.
		t.Fatal(err)
	}
	forge, stop := context.WithCancel(ctx)
	defer stop()
	forged := make(chan struct{})
	go func() {
		defer close(forged)
		ghost := []byte(`{"claimed_by":"ghost","delivery":1,"expires_at":"2099-01-01T00:00:00Z"}`)
		for forge.Err() == nil {
			_, _ = claims.Put(forge, id+".1", ghost)
			select {
			case <-forge.Done():
			case <-time.After(100 * time.Millisecond):
			}
		}
	}()
	srv.Client(t, &salvage.Config{Pipelines: []*salvage.Pipeline{words()}})
	if _, err := c.JobSubmit(ctx, "words", map[string]any{"words": []string{"held"}}, &salvage.SubmitOpts{JobID: id}); err != nil {
		t.Fatal(err)
	}
	if j := salvagetest.WaitJob(t, c, id, 60*time.Second); j.Status != salvage.JobDone {
		t.Fatalf("job %+v", j)
	}
	stop()
	<-forged
}
