package salvage_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/nats-io/nats.go/micro"

	"github.com/salvagehq/salvage"
	"github.com/salvagehq/salvage/salvagetest"
)

// TestTenantsSeeOnlyTheirOwnJobs: through salvage.api.tenant.<t>, each
// tenant submits jobs recorded as its own, and lists, reads, cancels and
// reads the results of its own only: another tenant's job answers 404,
// like a job that does not exist, and a body naming another tenant is
// refused.
func TestTenantsSeeOnlyTheirOwnJobs(t *testing.T) {
	t.Parallel()
	srv := salvagetest.StartServer(t)
	c := srv.Client(t, &salvage.Config{Pipelines: []*salvage.Pipeline{words()}, Roles: salvage.AllRoles()})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ask := func(tenant, op, body string, out any) string {
		t.Helper()
		reply, err := srv.Conn.Request(salvage.TenantPrefix(tenant)+".jobs."+op, []byte(body), 5*time.Second)
		if err != nil {
			t.Fatalf("%s %s %s: %v", tenant, op, body, err)
		}
		if code := reply.Header.Get(micro.ErrorCodeHeader); code != "" {
			return code
		}
		if err := json.Unmarshal(reply.Data, out); err != nil {
			t.Fatalf("%s: %v: %s", op, err, reply.Data)
		}
		return ""
	}
	submit := func(tenant, body string) string {
		t.Helper()
		var r salvage.SubmitReply
		if code := ask(tenant, "submit", body, &r); code != "" {
			t.Fatalf("%s's submit: %s", tenant, code)
		}
		if _, err := c.JobWait(ctx, r.JobID); err != nil {
			t.Fatal(err)
		}
		return r.JobID
	}
	salvagetest.Eventually(t, 30*time.Second, func() bool {
		_, err := srv.Conn.Request(salvage.TenantPrefix("a")+".jobs.list", nil, time.Second)
		return err == nil
	}, "the service to answer")
	a1 := submit("a", `{"pipeline":"words","input":{"words":["x","y","z"]}}`)
	a2 := submit("a", `{"pipeline":"words","input":{"words":["w"]},"tenant":"a"}`)
	b1 := submit("b", `{"pipeline":"words","input":{"words":["v"]}}`)
	for id, want := range map[string]string{a1: "a", a2: "a", b1: "b"} {
		if j, err := c.JobGet(ctx, id); err != nil || j.Tenant != want {
			t.Errorf("job %s: %+v, %v; want tenant %s", id, j, err, want)
		}
	}
	var r salvage.SubmitReply
	if code := ask("a", "submit", `{"pipeline":"words","input":{"words":["q"]},"tenant":"b"}`, &r); code != salvage.CodeMalformed {
		t.Errorf("a submitting as b: %q, %+v; want %s", code, r, salvage.CodeMalformed)
	}

	var jobs []salvage.Job
	if code := ask("a", "list", ``, &jobs); code != "" || len(jobs) != 2 || jobs[0].ID != a2 || jobs[1].ID != a1 {
		t.Fatalf("a's list: %s %+v; want a2, a1", code, jobs)
	}
	if code := ask("b", "list", `{"limit":5}`, &jobs); code != "" || len(jobs) != 1 || jobs[0].ID != b1 {
		t.Fatalf("b's list: %s %+v", code, jobs)
	}
	if code := ask("c", "list", ``, &jobs); code != "" || len(jobs) != 0 {
		t.Fatalf("c's list: %s %+v", code, jobs)
	}

	var st salvage.ChunkPage
	if code := ask("a", "status", `{"job_id":"`+a1+`"}`, &st); code != "" || st.Job.ID != a1 {
		t.Errorf("a's status of its job: %s %+v", code, st.Job)
	}
	for _, op := range []string{"status", "results", "cancel"} {
		var out any
		if code := ask("a", op, `{"job_id":"`+b1+`"}`, &out); code != salvage.CodeUnknown {
			t.Errorf("a's %s of b's job: %q %v; want %s, as for no job", op, code, out, salvage.CodeUnknown)
		}
	}
	if j, err := c.JobGet(ctx, b1); err != nil || j.Status != salvage.JobDone {
		t.Errorf("b's job after a's refused cancel: %+v, %v", j, err)
	}

	var res salvage.Results
	if code := ask("a", "results", `{"job_id":"`+a1+`","limit":2}`, &res); code != "" || res.Chunks != 3 || len(res.Results) != 2 || res.NextOffset != 2 || res.Results[0].Chunk != 1 {
		t.Fatalf("a's first page of results: %s %+v", code, res)
	}
	direct, err := c.JobResults(ctx, a1)
	if err != nil {
		t.Fatal(err)
	}
	if string(res.Results[1].Result) != string(direct[2]) {
		t.Errorf("chunk 2's result through the API %s, read directly %s", res.Results[1].Result, direct[2])
	}
	var last salvage.Results
	if code := ask("a", "results", `{"job_id":"`+a1+`","offset":2}`, &last); code != "" || len(last.Results) != 1 || last.NextOffset != 0 || last.Results[0].Chunk != 3 {
		t.Fatalf("a's last page of results: %s %+v", code, last)
	}
}
