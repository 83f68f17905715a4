package salvage_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/salvagehq/salvage"
	"github.com/salvagehq/salvage/salvagetest"
)

// TestEveryOperatorActionIsOnRecord: each operator action — pause,
// resume, replay, resolve, ack, bulk, cancel, approve's refusal, limits —
// is in SALVAGE_AUDIT with who, why and the outcome; a refused one says
// refused with the error; an envelope's entries are found under its job
// and by the envelope alone; pages continue where they stopped.
func TestEveryOperatorActionIsOnRecord(t *testing.T) {
	t.Parallel()
	srv := salvagetest.StartServer(t)
	c := srv.Client(t, &salvage.Config{Pipelines: []*salvage.Pipeline{words()}})
	ctx := context.Background()
	ann := salvage.WithActor(ctx, salvage.Actor{Name: "ann", Via: salvage.ViaDashboard, Role: "operator", Verified: true})
	id, err := c.JobSubmit(ctx, "words", map[string]any{"words": []string{"fine", "panic", "panic"}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if j := salvagetest.WaitJob(t, c, id, time.Minute); j.Status != salvage.JobIncomplete {
		t.Fatalf("job %s", j.Status)
	}
	envs := settled(t, srv, c, id, time.Minute)
	if len(envs) != 2 {
		t.Fatalf("%d envelopes, want 2", len(envs))
	}
	if _, err := c.JobCancel(ann, id, ""); !errors.Is(err, salvage.ErrJobFinished) {
		t.Fatalf("cancel: %v", err)
	}
	if _, err := c.ChunkApprove(ann, id, 1, salvage.Decision{Note: "looks right"}); !errors.Is(err, salvage.ErrNotAwaitingApproval) {
		t.Fatalf("approve: %v", err)
	}
	if _, err := c.EnvelopeReplay(salvage.WithReason(ann, "the parser is fixed"), envs[0].ID, ""); err != nil {
		t.Fatal(err)
	}
	if _, err := c.EnvelopeAck(ctx, envs[1].ID, "bob"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.EnvelopeResolve(ann, envs[1].ID, "", "done by hand"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.EnvelopeResolve(ann, envs[1].ID, "", "again"); !errors.Is(err, salvage.ErrAlreadyResolved) {
		t.Fatalf("second resolve: %v", err)
	}

	page, err := c.AuditList(ctx, salvage.AuditQuery{Job: id})
	if err != nil {
		t.Fatal(err)
	}
	type row struct {
		action  salvage.AuditAction
		name    string
		outcome salvage.AuditOutcome
		reason  string
	}
	want := []row{
		{salvage.AuditCancel, "ann", salvage.AuditRefused, ""},
		{salvage.AuditApprove, "ann", salvage.AuditRefused, "looks right"},
		{salvage.AuditReplay, "ann", salvage.AuditOK, "the parser is fixed"},
		{salvage.AuditAck, "bob", salvage.AuditOK, ""},
		{salvage.AuditResolve, "ann", salvage.AuditOK, "done by hand"},
		{salvage.AuditResolve, "ann", salvage.AuditRefused, "again"},
	}
	if len(page.Items) != len(want) || page.Next != 0 {
		t.Fatalf("job %s audit: %d entries (next %d), want %d: %+v", id, len(page.Items), page.Next, len(want), page.Items)
	}
	for i, w := range want {
		e := page.Items[i]
		if e.Action != w.action || e.Actor.Name != w.name || e.Outcome != w.outcome || e.Reason != w.reason || e.Job != id || e.DoneAt.Before(e.At) {
			t.Errorf("entry %d = %+v, want %+v", i, e, w)
		}
	}
	if a := page.Items[2].Actor; a.Via != salvage.ViaDashboard || !a.Verified || a.Role != "operator" {
		t.Errorf("ann's actor = %+v", a)
	}
	if a := page.Items[3].Actor; a.Via != salvage.ViaAPI || a.Verified {
		t.Errorf("bob's actor = %+v: a name given by the caller is unverified", a)
	}
	if e := page.Items[5]; e.Error == "" || e.Envelope != envs[1].ID {
		t.Errorf("refused resolve = %+v: want its error and envelope", e)
	}

	// One envelope's entries, by the envelope alone; a page of one goes on.
	mine, err := c.AuditList(ctx, salvage.AuditQuery{Envelope: envs[1].ID, Limit: 1})
	if err != nil || len(mine.Items) != 1 || mine.Items[0].Action != salvage.AuditAck || mine.Next == 0 {
		t.Fatalf("envelope %s, first page: %+v, %v", envs[1].ID, mine, err)
	}
	rest, err := c.AuditList(ctx, salvage.AuditQuery{Envelope: envs[1].ID, After: mine.Next})
	if err != nil || len(rest.Items) != 2 || rest.Items[0].Action != salvage.AuditResolve || rest.Next != 0 {
		t.Fatalf("envelope %s, second page: %+v, %v", envs[1].ID, rest, err)
	}

	// Pipelines and limits are filed under their names.
	if _, err := c.PipelinePause(salvage.WithReason(ann, "model upgrade"), "words", "", ""); err != nil {
		t.Fatal(err)
	}
	if _, err := c.PipelineResume(ann, "words", ""); err != nil {
		t.Fatal(err)
	}
	ps, err := c.AuditList(ctx, salvage.AuditQuery{Pipeline: "words"})
	if err != nil || len(ps.Items) != 2 || ps.Items[0].Action != salvage.AuditPause || ps.Items[0].Reason != "model upgrade" ||
		ps.Items[1].Action != salvage.AuditResume || ps.Items[1].Actor.Name != "ann" {
		t.Fatalf("pipeline audit: %+v, %v", ps, err)
	}
	key := salvage.LimitKey(salvage.LimitSystem, "search")
	if _, err := c.LimitSet(ann, salvage.Limit{Key: key, RequestsPerMinute: 60}, ""); err != nil {
		t.Fatal(err)
	}
	if err := c.LimitRemove(ann, key); err != nil {
		t.Fatal(err)
	}
	if err := c.LimitRemove(ann, key); !errors.Is(err, salvage.ErrUnknownLimit) {
		t.Fatalf("second remove: %v", err)
	}
	ls, err := c.AuditList(ctx, salvage.AuditQuery{LimitKey: key})
	if err != nil || len(ls.Items) != 3 || ls.Items[0].Action != salvage.AuditLimitSet || ls.Items[2].Outcome != salvage.AuditRefused {
		t.Fatalf("limit audit: %+v, %v", ls, err)
	}

	// Everything, one action, from a time.
	all, err := c.AuditList(ctx, salvage.AuditQuery{Action: salvage.AuditResolve, Since: page.Items[0].At})
	if err != nil || len(all.Items) != 2 {
		t.Fatalf("resolves since the first entry: %+v, %v", all, err)
	}
	for _, q := range []salvage.AuditQuery{{Job: id, Pipeline: "words"}, {Action: "explode"}, {Job: "a.b"}, {Limit: salvage.PageMax + 1}} {
		if _, err := c.AuditList(ctx, q); err == nil {
			t.Errorf("AuditList(%+v) took it", q)
		}
	}
}

// TestBulkActionsAreRecordedOneByOne: a bulk replay is one entry with its
// filter and counts, and one entry per envelope naming it.
func TestBulkActionsAreRecordedOneByOne(t *testing.T) {
	t.Parallel()
	srv := salvagetest.StartServer(t)
	c := srv.Client(t, &salvage.Config{Pipelines: []*salvage.Pipeline{words()}})
	ctx := salvage.WithActor(context.Background(), salvage.Actor{Name: "cy"})
	id, err := c.JobSubmit(ctx, "words", map[string]any{"words": []string{"panic", "panic", "panic"}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	salvagetest.WaitJob(t, c, id, time.Minute)
	settled(t, srv, c, id, time.Minute)
	res, err := c.EnvelopeBulk(ctx, salvage.BulkRequest{Action: salvage.BulkAck, Filter: salvage.EnvelopeFilter{Job: id}})
	if err != nil || res.Acted != 3 {
		t.Fatalf("bulk: %+v, %v", res, err)
	}
	all, err := c.AuditList(ctx, salvage.AuditQuery{})
	if err != nil || len(all.Items) != 4 {
		t.Fatalf("audit: %+v, %v", all, err)
	}
	bulk := all.Items[3]
	if bulk.Action != salvage.AuditBulk || bulk.Actor.Name != "cy" || bulk.Outcome != salvage.AuditOK {
		t.Fatalf("bulk entry = %+v", bulk)
	}
	for _, e := range all.Items[:3] {
		if e.Action != salvage.AuditAck || e.Job != id || e.Envelope == "" || e.Detail != "bulk "+bulk.ID || e.Actor.Name != "cy" {
			t.Errorf("envelope entry = %+v", e)
		}
	}
}
