package cli_test

import (
	"encoding/json"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/salvagehq/salvage/cmd/salvage/internal/cli"
	"github.com/salvagehq/salvage/cmd/salvage/internal/contractreview"
	"github.com/salvagehq/salvage/natsconf"
	"github.com/salvagehq/salvage/salvagetest"
)

// Users of natsconf/accounts.conf, with its example passwords.
var (
	asWorker    = []string{"--user", "worker", "--password", "worker-example-password"}
	asSubmitter = []string{"--user", "submitter", "--password", "submitter-example-password"}
	asOperator  = []string{"--user", "operator", "--password", "operator-example-password"}
)

// natsAs runs the nats CLI as a user and returns everything it printed
// and its exit error.
func natsAs(t *testing.T, url string, user []string, args ...string) (string, error) {
	t.Helper()
	cmd := exec.Command(natsBinary(t), append(append([]string{"--server", url, "--timeout", "2s"}, user...), args...)...)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// TestLeastPrivilegeUsers runs Salvage on the server config with accounts
// that natsconf ships: the worker user runs every role, the submitter
// submits and waits, the operator works the DLQ and the API — and each is
// refused, with the server's own words, outside its job: a worker cannot
// purge the DLQ, a submitter cannot read the journal, an operator cannot
// delete a stream or write a bucket.
func TestLeastPrivilegeUsers(t *testing.T) {
	srv, err := natsconf.StartConfigFile(filepath.Join("..", "..", "..", "..", "natsconf", "accounts.conf"), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Shutdown)
	url := srv.ClientURL()
	// Chunks fail often enough, with no tier-1 retry and one delivery,
	// for the DLQ to fill and the recovery roles to work.
	up(t, append(append([]string{"--server", url, "--model-failure-rate", "0.3", "--retries", "0", "--max-deliver", "1"}, fastTiers...), asWorker...)...)

	contract := writeFile(t, "contract.txt", contractreview.Contract(4, 1))
	code, out, errOut := run(t, "", append([]string{"submit", "contract-review", contract, "--wait", "--server", url}, asSubmitter...)...)
	if code == cli.ExitError {
		t.Fatalf("the submitter's submit --wait: exit %d: %s", code, errOut)
	}
	job := strings.TrimSpace(out)

	// The submitter may not read the journal: salvage trace says so at
	// once, naming what was refused; so does the nats CLI.
	start := time.Now()
	code, _, errOut = run(t, "", append([]string{"trace", job, "--server", url}, asSubmitter...)...)
	if code == cli.ExitOK || !strings.Contains(errOut, "the server refused this user") || !strings.Contains(errOut, "Permissions Violation for Publish") {
		t.Fatalf("the submitter's trace: exit %d: %s", code, errOut)
	}
	if took := time.Since(start); took > 10*time.Second {
		t.Errorf("the refusal took %s to surface", took)
	}
	if out, err := natsAs(t, url, asSubmitter, "kv", "get", "salvage_journal", "any"); err == nil || !strings.Contains(out, "Permissions Violation") {
		t.Errorf("the submitter read the journal bucket: %v\n%s", err, out)
	}

	// The operator works the DLQ through the API and reads it.
	salvagetest.Eventually(t, 30*time.Second, func() bool {
		code, out, _ := run(t, "", append([]string{"dlq", "ls", "--server", url}, asOperator...)...)
		return code == 0 && strings.Count(out, "\n") > 1
	}, "the operator to list envelopes")
	for _, args := range [][]string{{"pause", "contract-review"}, {"resume", "contract-review"}, {"status", job}, {"trace", job}, {"breakers"}, {"jobs"}} {
		if code, out, errOut := run(t, "", append(append(args, "--server", url), asOperator...)...); code != cli.ExitOK {
			t.Errorf("the operator's %v: exit %d: %s%s", args, code, out, errOut)
		}
	}
	if out, err := natsAs(t, url, asOperator, "stream", "info", "SALVAGE_DLQ"); err != nil {
		t.Errorf("the operator's stream info of the DLQ: %v\n%s", err, out)
	}
	for _, args := range [][]string{{"stream", "rm", "SALVAGE_DLQ", "-f"}, {"kv", "put", "salvage_jobs", "x", "y"}} {
		if out, err := natsAs(t, url, asOperator, args...); err == nil || !strings.Contains(out, "Permissions Violation") {
			t.Errorf("the operator's %v was not refused: %v\n%s", args, err, out)
		}
	}

	// The worker may not purge the DLQ: refused, and nothing is lost.
	before, _ := natsAs(t, url, asOperator, "stream", "info", "SALVAGE_DLQ", "--json")
	if out, err := natsAs(t, url, asWorker, "stream", "purge", "SALVAGE_DLQ", "-f"); err == nil || !strings.Contains(out, `Permissions Violation for Publish to "$JS.API.STREAM.PURGE.SALVAGE_DLQ"`) {
		t.Errorf("the worker's DLQ purge was not refused: %v\n%s", err, out)
	}
	if out, err := natsAs(t, url, asWorker, "stream", "rm", "SALVAGE_CHUNKS", "-f"); err == nil || !strings.Contains(out, "Permissions Violation") {
		t.Errorf("the worker's stream deletion was not refused: %v\n%s", err, out)
	}
	after, _ := natsAs(t, url, asOperator, "stream", "info", "SALVAGE_DLQ", "--json")
	if msgs(before) == 0 || msgs(after) < msgs(before) {
		t.Errorf("DLQ messages %d before the refused purge, %d after", msgs(before), msgs(after))
	}
}

// msgs reads the message count from `nats stream info --json`.
func msgs(info string) int {
	var st struct {
		State struct {
			Messages int `json:"messages"`
		} `json:"state"`
	}
	_ = json.Unmarshal([]byte(info), &st)
	return st.State.Messages
}
