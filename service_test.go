package salvage_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/micro"

	"github.com/salvagehq/salvage"
	"github.com/salvagehq/salvage/salvagetest"
)

// TestServiceRefusesBadBodiesBeforeActing: every endpoint of salvage.api
// answers a malformed, oversized or unknown-field body, or a bulk action
// with no filter, with an error code and does nothing; an unknown job's
// cancel is a 404 at once, not after the caller's timeout.
func TestServiceRefusesBadBodiesBeforeActing(t *testing.T) {
	t.Parallel()
	srv := salvagetest.StartServer(t)
	c := srv.Client(t, &salvage.Config{Pipelines: []*salvage.Pipeline{words()}, Roles: salvage.AllRoles()})
	ctx := context.Background()
	salvagetest.Eventually(t, time.Minute, func() bool {
		_, err := srv.Conn.Request("salvage.api.pipelines.list", nil, time.Second)
		return err == nil
	}, "the service to answer")
	ask := func(subject, body string, timeout time.Duration) (string, string) {
		t.Helper()
		reply, err := srv.Conn.Request("salvage.api."+subject, []byte(body), timeout)
		if err != nil {
			t.Fatalf("%s %s: %v", subject, body, err)
		}
		return reply.Header.Get(micro.ErrorCodeHeader), reply.Header.Get(micro.ErrorHeader)
	}
	for _, tc := range []struct{ subject, body, code string }{
		{"dlq.bulk", `{"action":"replay"}`, "400"},
		{"dlq.bulk", `{"action":"replay","min_age":"0s"}`, "400"},
		{"dlq.bulk", `{"action":"replay","categry":"TRANSIENT_NETWORK"}`, "400"},
		{"dlq.bulk", `{"action":"replay","category":"TRANSIENT_NETWORK"} {}`, "400"},
		{"dlq.replay", `{"envelope_id":"01JNOPE","note":"x","force":true}`, "400"},
		{"dlq.show", `{"envelope_id":"` + strings.Repeat("x", 70<<10) + `"}`, "413"},
		{"dlq.show", `{"envelope_id":"01JNOPE"}`, "404"},
		{"pipelines.pause", `{"pipeline":"words","reasn":"deploy"}`, "400"},
		{"pipelines.pause", `{"pipeline":"words",`, "400"},
		{"jobs.submit", `{"pipeline":"words","input":{"words":["a"]},"priority":1}`, "400"},
		{"jobs.cancel", `{"job_id":"01JNOSUCHJOB0000000000000"}`, "404"},
		{"jobs.status", `{"job_id":"01JNOSUCHJOB0000000000000","verbose":true}`, "400"},
		{"approve", `{"job_id":"x","chunk":1,"aprove":true}`, "400"},
		// Issue 33: taken silently before — a key named twice (the last
		// won), a negative limit or offset, a negative age.
		{"jobs.cancel", `{"job_id":"01JNOSUCHJOB0000000000000","job_id":"01JOTHERJOB00000000000000"}`, "400"},
		{"jobs.list", `{"limit":-1}`, "400"},
		{"jobs.status", `{"job_id":"01JNOSUCHJOB0000000000000","offset":-3}`, "400"},
		{"dlq.list", `{"min_age":"-5s"}`, "400"},
		{"dlq.list", `{"limit":-1}`, "400"},
		{"dlq.bulk", `{"action":"ack","status":"open","min_age":"-5s"}`, "400"},
		{"dlq.bulk", `{"action":"ack","status":"open","limit":-1}`, "400"},
		{"approvals.list", `{"limit":201}`, "400"},
		{"approvals.list", `{"limit":-1}`, "400"},
		{"approvals.list", `{"limt":5}`, "400"},
	} {
		// Two seconds, well inside a cancel's wait for a job still being
		// split: an unknown id is answered at once.
		if code, text := ask(tc.subject, tc.body, 2*time.Second); code != tc.code {
			t.Errorf("%s %.80s: %q %q, want %s", tc.subject, tc.body, code, text, tc.code)
		}
	}
	ps, err := c.PipelineList(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range ps {
		if p.Paused {
			t.Fatalf("a refused pause paused %s", p.Pipeline)
		}
	}
	jobs, err := c.JobList(ctx, nil)
	if err != nil || len(jobs) != 0 {
		t.Fatalf("a refused submit made jobs: %v %v", jobs, err)
	}
	// A good request with nothing waiting: an empty list, not null.
	reply, err := srv.Conn.Request("salvage.api.approvals.list", []byte(`{"limit":5}`), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if code := reply.Header.Get(micro.ErrorCodeHeader); code != "" || strings.TrimSpace(string(reply.Data)) != "[]" {
		t.Fatalf("approvals.list with nothing waiting: %q %q", code, reply.Data)
	}
}

// TestServiceReadsJobsAndTraces: the read endpoints an operator needs
// instead of bucket reads — jobs.list and jobs.trace, a page of chunks or
// one chunk — answer what the Client reads directly, in bounded pages.
func TestServiceReadsJobsAndTraces(t *testing.T) {
	t.Parallel()
	srv := salvagetest.StartServer(t)
	c := srv.Client(t, &salvage.Config{Pipelines: []*salvage.Pipeline{words()}, Roles: salvage.AllRoles()})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var ids []string
	for _, in := range []any{map[string]any{"words": []string{"a", "b", "c", "d", "e"}}, map[string]any{"words": []string{"f"}}} {
		id, err := c.JobSubmit(ctx, "words", in, nil)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.JobWait(ctx, id); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	ask := func(subject, body string, out any) string {
		t.Helper()
		reply, err := srv.Conn.Request("salvage.api."+subject, []byte(body), 5*time.Second)
		if err != nil {
			t.Fatalf("%s %s: %v", subject, body, err)
		}
		if code := reply.Header.Get(micro.ErrorCodeHeader); code != "" {
			return code
		}
		if err := json.Unmarshal(reply.Data, out); err != nil {
			t.Fatalf("%s: %v: %s", subject, err, reply.Data)
		}
		return ""
	}
	var jobs []salvage.Job
	if code := ask("jobs.list", `{"limit":1}`, &jobs); code != "" || len(jobs) != 1 {
		t.Fatalf("jobs.list limit 1: %s %+v", code, jobs)
	}
	if code := ask("jobs.list", ``, &jobs); code != "" || len(jobs) != 2 {
		t.Fatalf("jobs.list: %s %+v", code, jobs)
	}
	var page salvage.Trace
	if code := ask("jobs.trace", `{"job_id":"`+ids[0]+`","limit":2}`, &page); code != "" || len(page.Chunks) != 2 || page.NextOffset != 2 || page.Chunks[0].Chunk != 1 {
		t.Fatalf("jobs.trace first page: %s %+v", code, page)
	}
	var last salvage.Trace
	if code := ask("jobs.trace", `{"job_id":"`+ids[0]+`","offset":4,"limit":2}`, &last); code != "" || len(last.Chunks) != 1 || last.NextOffset != 0 || last.Chunks[0].Chunk != 5 {
		t.Fatalf("jobs.trace last page: %s %+v", code, last)
	}
	direct, err := c.JobTrace(ctx, ids[0])
	if err != nil {
		t.Fatal(err)
	}
	var one salvage.Trace
	if code := ask("jobs.trace", `{"job_id":"`+ids[0]+`","chunk":5}`, &one); code != "" || len(one.Chunks) != 1 {
		t.Fatalf("jobs.trace chunk 5: %s %+v", code, one)
	}
	want, _ := json.Marshal(direct.Chunks[4])
	got, _ := json.Marshal(one.Chunks[0])
	if string(got) != string(want) || len(one.Chunks[0].Calls) == 0 {
		t.Errorf("chunk 5 through the service:\n%s\ndirect:\n%s", got, want)
	}
	for _, tc := range []struct{ body, code string }{
		{`{"job_id":"01JNOSUCHJOB0000000000000"}`, "404"},
		{`{"job_id":"` + ids[0] + `","chunk":9}`, "404"},
		{`{"job_id":"` + ids[0] + `","chunk":-1}`, "400"},
		{`{"job_id":"a.b"}`, "400"},
		{`{"job_id":"` + ids[0] + `","verbose":true}`, "400"},
	} {
		var v any
		if code := ask("jobs.trace", tc.body, &v); code != tc.code {
			t.Errorf("jobs.trace %s: %q, want %s", tc.body, code, tc.code)
		}
	}
}
