package cli_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"

	"github.com/salvagehq/salvage"
	"github.com/salvagehq/salvage/cmd/salvage/internal/contractreview"
	"github.com/salvagehq/salvage/cmd/salvage/internal/demo"
	"github.com/salvagehq/salvage/cmd/salvage/internal/operator"
	"github.com/salvagehq/salvage/natsconf"
	"github.com/salvagehq/salvage/salvagetest"
	"github.com/salvagehq/salvage/streams"
)

// as returns the connection flags of a user of natsconf/accounts.conf:
// its example password and its own inbox prefix.
func as(user string) []string {
	return []string{"--user", user, "--password", user + "-example-password", "--inbox-prefix", "_INBOX_" + user}
}

// natsAs runs the nats CLI with the given connection flags and returns
// everything it printed and its exit error.
func natsAs(t *testing.T, url string, user []string, args ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, natsBinary(t), append(append([]string{"--server", url, "--timeout", "2s"}, user...), args...)...)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// refused asserts that the nats CLI, run as user, fails with the server's
// permissions violation. A run that failed otherwise never heard the
// server's answer (on a loaded machine forty CLIs started at once can
// time out connecting: "read tcp ...: i/o timeout") and asks again, for
// a minute; a run that succeeded was not refused.
func refused(t *testing.T, url, user string, args ...string) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		out, err := natsAs(t, url, as(user), args...)
		if err != nil && strings.Contains(out, "Permissions Violation") {
			return
		}
		if err == nil || time.Now().After(deadline) {
			t.Errorf("%s's `nats %s` was not refused by the server: %v\n%s", user, strings.Join(args, " "), err, out)
			return
		}
		// A CLI that fails at once (a refused connection) must not be
		// started back to back for a minute.
		select {
		case <-t.Context().Done():
			return
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// TestLeastPrivilegeUsers runs Salvage on the server config with accounts
// that natsconf ships. Admin provisions; the worker user then runs every
// role without changing any configuration, the submitter submits and
// waits, the operator works through salvage.api, an agent serves requests
// — and each is refused, in the server's own words, outside its job:
// stream and consumer edits, another user's replies, the DLQ's purge,
// bucket reads and writes.
func TestLeastPrivilegeUsers(t *testing.T) {
	t.Parallel()
	srv, err := natsconf.StartConfigFile(filepath.Join("..", "..", "..", "..", "natsconf", "accounts.conf"), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Shutdown)
	url := srv.ClientURL()
	// Chunks fail often enough, with no tier-1 retry and one delivery,
	// for the DLQ to fill and the recovery roles to work; in the three
	// partitions the file lists.
	shape := []string{"--max-deliver", "1", "--ack-wait", "2s", "--partitions", "3", "--demo-pipelines"}

	// Before provisioning the worker cannot start, and says what to do.
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	early := exec.CommandContext(ctx, binary, append(append([]string{"up", "--server", url, "--http", "127.0.0.1:0", "--log-level", "error"}, shape...), as("worker")...)...)
	demo.DieWithParent(early)
	out, err := early.CombinedOutput()
	if err == nil || ctx.Err() != nil || !strings.Contains(string(out), "salvage provision") {
		t.Fatalf("the worker's up before provisioning: %v (context %v)\n%s", err, ctx.Err(), out)
	}

	code, stdout, errOut := run(t, "", append(append([]string{"provision", "--server", url}, shape...), as("admin")...)...)
	if code != operator.ExitOK || !strings.Contains(stdout, "provisioned") {
		t.Fatalf("admin's provision: exit %d: %s%s", code, stdout, errOut)
	}
	// The worker's and the api's logs are kept: nothing they do may be
	// refused. The worker user runs every role but the service's.
	var workerLog logBuffer
	worker := exec.Command(binary, append(append(append([]string{"up", "--server", url, "--http", "127.0.0.1:0", "--log-format", "json", "--log-level", "warn",
		"--role", "worker,dead-letter,recovery", "--model-failure-rate", "0.3", "--retries", "0"}, fastTiers...), shape...), as("worker")...)...)
	demo.DieWithParent(worker)
	worker.Stderr = io.MultiWriter(os.Stderr, &workerLog)
	startPrinting(t, worker, "NATS_URL=")
	api := exec.Command(binary, append(append([]string{"up", "--server", url, "--log-format", "json", "--log-level", "warn", "--role", "api"}, shape...), as("api")...)...)
	demo.DieWithParent(api)
	api.Stderr = io.MultiWriter(os.Stderr, &workerLog)
	startPrinting(t, api, "NATS_URL=")

	contract := writeFile(t, "contract.txt", contractreview.Contract(4, 1))
	code, stdout, errOut = run(t, "", append([]string{"submit", "contract-review", contract, "--wait", "--server", url}, as("submitter")...)...)
	if code == operator.ExitError {
		t.Fatalf("the submitter's submit --wait: exit %d: %s", code, errOut)
	}
	job := strings.TrimSpace(stdout)

	// The operator works through the API: the DLQ, jobs, traces, breakers,
	// pipelines — with no bucket of its own to read.
	salvagetest.Eventually(t, time.Minute, func() bool {
		code, out, _ := run(t, "", append([]string{"dlq", "ls", "--server", url}, as("operator")...)...)
		return code == 0 && strings.Count(out, "\n") > 1
	}, "the operator to list envelopes")
	for _, args := range [][]string{{"pause", "contract-review"}, {"resume", "contract-review"}, {"status", job}, {"trace", job}, {"breakers"}, {"jobs"}, {"pipelines"}, {"workers"}} {
		if code, out, errOut := run(t, "", append(append(args, "--server", url), as("operator")...)...); code != operator.ExitOK {
			t.Errorf("the operator's %v: exit %d: %s%s", args, code, out, errOut)
		}
	}
	// A person on call in the OPS account acts through the service: the
	// server names her to it, and the audit records her name, verified,
	// whatever "by" her request claims; the operator user of SALVAGE is
	// recorded as its by, unverified.
	if code, out, errOut := run(t, "", append([]string{"pause", "contract-review", "--reason", "checking the audit", "--server", url}, as("alice")...)...); code != operator.ExitOK {
		t.Errorf("alice's pause: exit %d: %s%s", code, out, errOut)
	}
	if out, err := natsAs(t, url, as("alice"), "req", "salvage.api.pipelines.resume", `{"pipeline": "contract-review", "by": "mallory"}`); err != nil {
		t.Errorf("alice's resume claiming mallory: %v\n%s", err, out)
	}
	code, stdout, errOut = run(t, "", append([]string{"audit", "--pipeline", "contract-review", "--json", "--server", url}, as("alice")...)...)
	var audit salvage.AuditPage
	if code != operator.ExitOK || json.Unmarshal([]byte(stdout), &audit) != nil || len(audit.Items) != 4 {
		t.Fatalf("alice's audit: exit %d: %s%s", code, stdout, errOut)
	}
	for i, want := range []salvage.Actor{{Name: os.Getenv("USER"), Via: salvage.ViaService}, {Name: os.Getenv("USER"), Via: salvage.ViaService},
		{Name: "alice", Account: "OPS", Via: salvage.ViaService, Verified: true}, {Name: "alice", Account: "OPS", Via: salvage.ViaService, Verified: true}} {
		if want.Name == "" {
			want.Name = "cli"
		}
		if got := audit.Items[i].Actor; got != want || audit.Items[i].Outcome != salvage.AuditOK {
			t.Errorf("audit entry %d: %+v, want the actor %+v", i, audit.Items[i], want)
		}
	}
	if audit.Items[2].Reason != "checking the audit" || audit.Items[3].Action != salvage.AuditResume {
		t.Errorf("alice's entries: %+v", audit.Items[2:])
	}
	if out, err := natsAs(t, url, as("operator"), "stream", "info", "SALVAGE_DLQ"); err != nil {
		t.Errorf("the operator's stream info of the DLQ: %v\n%s", err, out)
	}
	if out, err := natsAs(t, url, as("operator"), "stream", "get", "SALVAGE_DLQ", "1"); err != nil || !strings.Contains(out, "salvage.dlq.") {
		t.Errorf("the operator's read of the DLQ's first message: %v\n%s", err, out)
	}
	// The submitter asks the service for its job's status, which names
	// the job's partition when it is not 0.
	if code, out, errOut := run(t, "", append([]string{"status", job, "--server", url}, as("submitter")...)...); code != operator.ExitOK || !strings.Contains(out, job) ||
		strings.Contains(out, "partition") != (streams.PartitionOf(job, 3) > 0) || !strings.Contains(out+"  partition 0", fmt.Sprintf("  partition %d", streams.PartitionOf(job, 3))) {
		t.Errorf("the submitter's status: exit %d: %s%s", code, out, errOut)
	}

	// Without its inbox prefix a user's request has nowhere to be answered:
	// salvage says which subject the server refused, and names the flag.
	bare := []string{"--user", "operator", "--password", "operator-example-password"}
	if code, _, errOut := run(t, "", append([]string{"jobs", "--server", url}, bare...)...); code == operator.ExitOK || !strings.Contains(errOut, "Permissions Violation for Subscription") || !strings.Contains(errOut, "--inbox-prefix") {
		t.Errorf("the operator's jobs without --inbox-prefix: exit %d: %s", code, errOut)
	}

	before := dlqMessages(t, url)
	recovery := consumerInfo(t, url, "SALVAGE_DLQ", "recovery-contract-review")
	var probes [][]string // user, then the nats CLI's arguments
	// Stream and consumer configuration: nobody but admin.
	for _, user := range []string{"worker", "operator", "submitter"} {
		probes = append(probes,
			[]string{user, "stream", "edit", "SALVAGE_DLQ", "--max-msgs", "1", "-f"},
			[]string{user, "consumer", "edit", "SALVAGE_DLQ", "recovery-contract-review", "--max-deliver", "1", "-f"},
			[]string{user, "stream", "rm", "SALVAGE_CHUNKS", "-f"},
			[]string{user, "consumer", "add", "SALVAGE_DLQ", "mine", "--pull", "--defaults"})
	}
	probes = append(probes,
		// Nobody but admin empties the DLQ: no documented operator
		// action needs it, and an envelope's record outlives its message.
		[]string{"worker", "stream", "purge", "SALVAGE_DLQ", "-f"},
		[]string{"operator", "stream", "purge", "SALVAGE_DLQ", "-f"},
		[]string{"submitter", "stream", "purge", "SALVAGE_DLQ", "-f"},
		[]string{"operator", "stream", "rmm", "SALVAGE_DLQ", "1", "-f"},
		// Chunks: the operator may replay by hand (its chunk is checked
		// against its job's record); nobody else may publish one.
		[]string{"submitter", "pub", "salvage.chunks.contract-review.x.1", "{}"},
		[]string{"agent-review", "pub", "salvage.chunks.contract-review.x.1", "{}"},
		// Claims: only Salvage's processes.
		[]string{"operator", "kv", "put", "salvage_claims", "x.1", "y"},
		[]string{"submitter", "kv", "put", "salvage_claims", "x.1", "y"},
		// Buckets: the operator and the submitter write none, the
		// submitter reads only job records, the agent nothing at all.
		[]string{"operator", "kv", "put", "salvage_jobs", "x", "y"},
		[]string{"operator", "kv", "get", "salvage_journal", "any"},
		[]string{"submitter", "kv", "put", "salvage_jobs", "x", "y"},
		[]string{"submitter", "kv", "get", "salvage_journal", "any"},
		[]string{"agent-review", "kv", "get", "salvage_jobs", "any"},
		// Another user's replies, and everyone's.
		[]string{"submitter", "sub", "_INBOX.>", "--count", "1"},
		[]string{"submitter", "sub", "_INBOX_operator.>", "--count", "1"},
		[]string{"worker", "sub", "_INBOX_admin.>", "--count", "1"},
		[]string{"agent-review", "sub", "salvage.>", "--count", "1"},
		[]string{"agent-review", "pub", "salvage.jobs.contract-review", "x"},
		// Only the api user serves salvage.api: not the worker, which
		// could otherwise answer operators' and tenants' requests.
		[]string{"worker", "sub", "salvage.api.>", "--count", "1"},
		[]string{"worker", "sub", "salvage.api.jobs.cancel", "--count", "1"},
		// Each agent user serves its own subjects only.
		[]string{"agent-review", "sub", "tools.payments.charge", "--count", "1"},
		[]string{"agent-review", "sub", "tools.>", "--count", "1"},
		[]string{"agent-payments", "sub", "agents.review.>", "--count", "1"},
		// A tenant speaks only through its own endpoints.
		[]string{"tenant-a", "pub", "salvage.api.tenant.b.jobs.list", "{}"},
		[]string{"tenant-a", "pub", "salvage.api.jobs.list", "{}"},
		[]string{"tenant-a", "pub", "salvage.jobs.contract-review", "x"},
		[]string{"tenant-a", "kv", "get", "salvage_jobs", "any"},
		[]string{"tenant-a", "sub", "_INBOX_tenant-b.>", "--count", "1"})
	// Each refusal waits out the CLI's 2s timeout: all at once.
	var wg sync.WaitGroup
	for _, p := range probes {
		wg.Go(func() { refused(t, url, p[0], p[1:]...) })
	}
	wg.Wait()
	if strings.Contains(workerLog.String(), "refused") {
		t.Errorf("the server refused the worker something it needs:\n%s", workerLog.String())
	}
	if after := dlqMessages(t, url); before == 0 || after < before {
		t.Errorf("DLQ messages %d before the refused changes, %d after", before, after)
	}
	if after := consumerInfo(t, url, "SALVAGE_DLQ", "recovery-contract-review"); after != recovery {
		t.Errorf("the recovery consumer changed: %s, then %s", recovery, after)
	}

	// salvage, too, is refused in the server's words: the submitter may
	// not trace (the service's trace endpoint is the operator's).
	code, _, errOut = run(t, "", append([]string{"trace", job, "--server", url}, as("submitter")...)...)
	if code == operator.ExitOK || !strings.Contains(errOut, "the server refused this user") || !strings.Contains(errOut, "Permissions Violation for Publish") {
		t.Errorf("the submitter's trace: exit %d: %s", code, errOut)
	}

	// Nor may the worker reshape its pool through salvage: provisioning
	// another MaxDeliver is refused, naming the step, and changes nothing.
	pool := consumerInfo(t, url, "SALVAGE_CHUNKS", "workers-contract-review")
	code, _, errOut = run(t, "", append([]string{"provision", "--server", url, "--demo-pipelines", "--max-deliver", "9", "--ack-wait", "2s"}, as("worker")...)...)
	if code == operator.ExitOK || !strings.Contains(errOut, "Permissions Violation for Publish") || !strings.Contains(errOut, "salvage provision") {
		t.Errorf("the worker's provision: exit %d: %s", code, errOut)
	}
	if after := consumerInfo(t, url, "SALVAGE_CHUNKS", "workers-contract-review"); after != pool {
		t.Errorf("the worker's refused provision changed its pool: %s, then %s", pool, after)
	}

	// The agent serves its own subjects and answers; the worker's request
	// reaches it.
	agent, err := nats.Connect(url, nats.UserInfo("agent-review", "agent-review-example-password"))
	if err != nil {
		t.Fatal(err)
	}
	defer agent.Close()
	if _, err := agent.Subscribe("agents.review.probe", func(m *nats.Msg) { _ = m.Respond([]byte("pong")) }); err != nil {
		t.Fatal(err)
	}
	if err := agent.Flush(); err != nil {
		t.Fatal(err)
	}
	if out, err := natsAs(t, url, as("worker"), "request", "agents.review.probe", "ping", "--raw"); err != nil || strings.TrimSpace(out) != "pong" {
		t.Errorf("the worker's request to the agent: %v\n%s", err, out)
	}

	tenantsKeptApart(t, url)
}

// dlqMessages counts the DLQ's messages as the operator sees them.
func dlqMessages(t *testing.T, url string) int {
	t.Helper()
	out, err := natsAs(t, url, as("operator"), "stream", "info", "SALVAGE_DLQ", "--json")
	if err != nil {
		t.Fatalf("the operator's stream info: %v\n%s", err, out)
	}
	var st struct {
		State struct {
			Messages int `json:"messages"`
		} `json:"state"`
	}
	if err := json.Unmarshal([]byte(out), &st); err != nil {
		t.Fatalf("stream info --json: %v\n%s", err, out)
	}
	return st.State.Messages
}

// consumerInfo reads a consumer's configuration as the operator sees it.
func consumerInfo(t *testing.T, url, stream, name string) string {
	t.Helper()
	out, err := natsAs(t, url, as("operator"), "consumer", "info", stream, name, "--json")
	if err != nil {
		t.Fatalf("the operator's consumer info: %v\n%s", err, out)
	}
	var info struct {
		Config json.RawMessage `json:"config"`
	}
	if err := json.Unmarshal([]byte(out), &info); err != nil || len(info.Config) == 0 {
		t.Fatalf("consumer info --json: %v\n%s", err, out)
	}
	return string(info.Config)
}

// logBuffer keeps what a process writes, for reading while it runs.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *logBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *logBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// tenantsKeptApart runs the two example tenants of accounts.conf through
// their endpoints: each submits a job and sees it to the end; tenant a
// cannot list, read the status or results of, or cancel tenant b's job
// (it answers as no job), nor submit as b; b's job is unchanged after.
func tenantsKeptApart(t *testing.T, url string) {
	t.Helper()
	conn := func(user string) *nats.Conn {
		nc, err := nats.Connect(url, nats.UserInfo(user, user+"-example-password"), nats.CustomInboxPrefix("_INBOX_"+user))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(nc.Close)
		return nc
	}
	a, b := conn("tenant-a"), conn("tenant-b")
	ask := func(nc *nats.Conn, tenant, op, body string, out any) string {
		t.Helper()
		reply, err := nc.Request(salvage.TenantPrefix(tenant)+".jobs."+op, []byte(body), 10*time.Second)
		if err != nil {
			t.Fatalf("tenant %s's %s: %v", tenant, op, err)
		}
		if code := reply.Header.Get(micro.ErrorCodeHeader); code != "" {
			return code
		}
		if err := json.Unmarshal(reply.Data, out); err != nil {
			t.Fatalf("tenant %s's %s: %v: %s", tenant, op, err, reply.Data)
		}
		return ""
	}
	text, _ := json.Marshal(contractreview.Contract(2, 7))
	submit := func(nc *nats.Conn, tenant string) string {
		var r salvage.SubmitReply
		if code := ask(nc, tenant, "submit", `{"pipeline":"contract-review","input":{"text":`+string(text)+`}}`, &r); code != "" {
			t.Fatalf("tenant %s's submit: %s", tenant, code)
		}
		salvagetest.Eventually(t, 2*time.Minute, func() bool {
			var st salvage.ChunkPage
			return ask(nc, tenant, "status", `{"job_id":"`+r.JobID+`"}`, &st) == "" && st.Job.Status != salvage.JobRunning
		}, "tenant %s's job %s to finish", tenant, r.JobID)
		return r.JobID
	}
	jobA, jobB := submit(a, "a"), submit(b, "b")
	var jobs []salvage.Job
	if code := ask(a, "a", "list", ``, &jobs); code != "" || len(jobs) != 1 || jobs[0].ID != jobA || jobs[0].Tenant != "a" {
		t.Errorf("tenant a's list: %s %+v; want its one job", code, jobs)
	}
	var res salvage.Results
	if code := ask(a, "a", "results", `{"job_id":"`+jobA+`"}`, &res); code != "" || res.Chunks != 2 || len(res.Results) > 2 {
		t.Errorf("tenant a's results of its job: %s %+v", code, res)
	}
	for _, op := range []string{"status", "results", "cancel"} {
		var out any
		if code := ask(a, "a", op, `{"job_id":"`+jobB+`"}`, &out); code != salvage.CodeUnknown {
			t.Errorf("tenant a's %s of tenant b's job: %q %v; want %s, as for no job", op, code, out, salvage.CodeUnknown)
		}
	}
	var r salvage.SubmitReply
	if code := ask(a, "a", "submit", `{"pipeline":"contract-review","input":{"text":"x."},"tenant":"b"}`, &r); code != salvage.CodeMalformed {
		t.Errorf("tenant a submitting as b: %q %+v; want %s", code, r, salvage.CodeMalformed)
	}
	var st salvage.ChunkPage
	if code := ask(b, "b", "status", `{"job_id":"`+jobB+`"}`, &st); code != "" || st.Job.Tenant != "b" || st.Job.Status == salvage.JobCancelled {
		t.Errorf("tenant b's job after a's refused cancel: %s %+v", code, st.Job)
	}

	// The same through salvage tenant, as tenant a's user: its own list,
	// no job of b's, and b's endpoints refused by the server.
	asA := append([]string{"--server", url}, as("tenant-a")...)
	if code, out, errOut := run(t, "", append([]string{"tenant", "--name", "a", "jobs"}, asA...)...); code != operator.ExitOK || !strings.Contains(out, jobA) || strings.Contains(out, jobB) {
		t.Errorf("salvage tenant jobs as tenant a: exit %d: %s%s", code, out, errOut)
	}
	// Its findings: one line per chunk done (the worker's model fails a
	// third of its calls, with no retry, so some may have been
	// dead-lettered).
	var stA salvage.ChunkPage
	if code := ask(a, "a", "status", `{"job_id":"`+jobA+`"}`, &stA); code != "" {
		t.Fatalf("tenant a's status of its job: %s", code)
	}
	if code, out, errOut := run(t, "", append([]string{"tenant", "--name", "a", "results", jobA}, asA...)...); code != operator.ExitOK || strings.Count(out, `{"chunk":`) != stA.Job.Summary.Done {
		t.Errorf("salvage tenant results of its job as tenant a: exit %d, want %d chunks' findings: %s%s", code, stA.Job.Summary.Done, out, errOut)
	}
	if code, _, errOut := run(t, "", append([]string{"tenant", "--name", "a", "cancel", jobB}, asA...)...); code == operator.ExitOK || !strings.Contains(errOut, "no job "+jobB) {
		t.Errorf("salvage tenant cancel of b's job as tenant a: exit %d: %s", code, errOut)
	}
	if code, _, errOut := run(t, "", append([]string{"tenant", "--name", "b", "jobs"}, asA...)...); code == operator.ExitOK || !strings.Contains(errOut, "Permissions Violation for Publish") {
		t.Errorf("salvage tenant --name b as tenant a's user: exit %d: %s", code, errOut)
	}
}
