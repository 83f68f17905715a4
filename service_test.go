package salvage_test

import (
	"context"
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
	srv := salvagetest.StartServer(t)
	c := srv.Client(t, &salvage.Config{Pipelines: []*salvage.Pipeline{words()}, Roles: salvage.RolesAll})
	ctx := context.Background()
	salvagetest.Eventually(t, 10*time.Second, func() bool {
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
	} {
		// Two seconds, well inside a cancel's wait for a job still being
		// split: an unknown id is answered at once.
		if code, text := ask(tc.subject, tc.body, 2*time.Second); code != tc.code {
			t.Errorf("%s %.80s: %q %q, want %s", tc.subject, tc.body, code, text, tc.code)
		}
	}
	ps, err := c.Pipelines(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range ps {
		if p.Paused {
			t.Fatalf("a refused pause paused %s", p.Pipeline)
		}
	}
	jobs, err := c.ListJobs(ctx, nil)
	if err != nil || len(jobs) != 0 {
		t.Fatalf("a refused submit made jobs: %v %v", jobs, err)
	}
}
