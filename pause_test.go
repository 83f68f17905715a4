package salvage_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"

	"github.com/salvagehq/salvage"
	"github.com/salvagehq/salvage/salvagetest"
)

// TestPauseAndResumeAPipeline: a paused pipeline accepts jobs but its
// chunk pool is paused (JetStream's consumer pause): their chunks wait
// undelivered, the pipeline says it is paused, and they finish after the
// resume; the service answers bad requests with a code.
func TestPauseAndResumeAPipeline(t *testing.T) {
	t.Parallel()
	srv := salvagetest.StartServer(t)
	c := srv.Client(t, &salvage.Config{Pipelines: []*salvage.Pipeline{words()}, Roles: salvage.AllRoles()})
	ctx := context.Background()
	p, err := c.PipelinePause(ctx, "words", "ann", "deploying the model")
	if err != nil || !p.Paused || p.PausedBy != "ann" || p.Reason != "deploying the model" {
		t.Fatalf("pause: %+v, %v", p, err)
	}
	pool, err := srv.JS.Consumer(ctx, "SALVAGE_CHUNKS", "workers-words")
	if err != nil {
		t.Fatal(err)
	}
	salvagetest.Eventually(t, time.Minute, func() bool {
		info, err := pool.Info(ctx)
		return err == nil && info.Paused
	}, "the pool of words paused")
	id, err := c.JobSubmit(ctx, "words", map[string]any{"words": []string{"held", "back"}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	// The splitter publishes the chunks before it creates the job's
	// record (a job is split all or nothing): wait for both.
	salvagetest.Eventually(t, time.Minute, func() bool {
		info, err := pool.Info(ctx)
		_, gerr := c.JobGet(ctx, id)
		return err == nil && info.NumPending == 2 && gerr == nil
	}, "both chunks of %s queued in the paused pool, and its record", id)
	st, err := c.ChunkList(ctx, id, nil)
	if err != nil || len(st.Chunks) != 2 || st.Chunks[0].Status != salvage.ChunkPending || st.Chunks[1].Status != salvage.ChunkPending {
		t.Fatalf("chunks while paused: %+v, %v; want both pending, never delivered", st, err)
	}
	if ps, err := c.PipelineList(ctx); err != nil || len(ps) != 1 || ps[0].Pipeline != "words" || !ps[0].Paused || ps[0].Workers != 1 {
		t.Fatalf("pipelines while paused = %+v, %v", ps, err)
	}
	if j, err := c.JobGet(ctx, id); err != nil || j.Status != salvage.JobRunning {
		t.Fatalf("job while paused: %+v, %v", j, err)
	}

	reply := func(subject string, body any) (string, string) {
		data, _ := json.Marshal(body)
		var m *nats.Msg
		salvagetest.Eventually(t, time.Minute, func() bool {
			var err error
			m, err = srv.Conn.Request(subject, data, 5*time.Second)
			return err == nil
		}, "an answer on %s", subject)
		return m.Header.Get(micro.ErrorCodeHeader), string(m.Data)
	}
	for _, tc := range []struct {
		subject string
		body    any
		code    string
	}{
		{"salvage.api.pipelines.pause", map[string]string{"pipeline": "nope"}, salvage.CodeUnknown},
		{"salvage.api.pipelines.pause", map[string]string{"pipeline": "a.b"}, salvage.CodeMalformed},
		{"salvage.api.pipelines.resume", map[string]string{}, salvage.CodeMalformed},
		{"salvage.api.pipelines.resume", "not an object", salvage.CodeMalformed},
	} {
		if code, body := reply(tc.subject, tc.body); code != tc.code {
			t.Errorf("%s %v answered code %q (%s); want %s", tc.subject, tc.body, code, body, tc.code)
		}
	}
	if _, err := c.PipelinePause(ctx, "nope", "ann", ""); !errors.Is(err, salvage.ErrUnknownPipeline) {
		t.Errorf("pausing an unknown pipeline: %v", err)
	}
	if _, err := c.PipelineResume(ctx, "a>", "ann"); !errors.Is(err, salvage.ErrInvalidToken) {
		t.Errorf("resuming a bad name: %v", err)
	}

	if code, body := reply("salvage.api.pipelines.resume", map[string]string{"pipeline": "words", "by": "bob"}); code != "" {
		t.Fatalf("resume answered %s: %s", code, body)
	}
	j := salvagetest.WaitJob(t, c, id, time.Minute)
	if j.Status != salvage.JobDone || j.Summary.Done != 2 {
		t.Fatalf("job after the resume = %+v", j)
	}
	ps, err := c.PipelineList(ctx)
	if err != nil || len(ps) != 1 || ps[0].Paused || ps[0].ResumedBy != "bob" || ps[0].Parked != 0 {
		t.Fatalf("pipelines after the resume: %+v, %v", ps, err)
	}
}
