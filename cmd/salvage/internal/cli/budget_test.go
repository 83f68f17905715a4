package cli_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/salvagehq/salvage"
	"github.com/salvagehq/salvage/cmd/salvage/internal/contractreview"
	"github.com/salvagehq/salvage/cmd/salvage/internal/operator"
	"github.com/salvagehq/salvage/cmd/salvage/internal/simmodel"
	"github.com/salvagehq/salvage/salvagetest"
)

// TestBudgetFromTheCLI: `salvage submit --budget-usd` on a contract
// review priced with `salvage up --price`: the job stops (exit 5,
// cancelled), its finished chunks keep their results, and one
// BUDGET_EXCEEDED envelope lists the chunks it stopped and escalates.
func TestBudgetFromTheCLI(t *testing.T) {
	t.Parallel()
	url, _ := up(t, "--model-latency", "5ms", "--concurrency", "2", "--sweep-interval", "1s", "--price", simmodel.ModelName+"=1000,1000")
	contract := writeFile(t, "contract.txt", contractreview.Contract(12, 3))
	code, out, errOut := run(t, "", "submit", "contract-review", contract, "--budget-usd", "0.01", "--wait", "--server", url)
	if code != operator.ExitCancelled {
		t.Fatalf("submit --wait exit %d; want %d (cancelled by its budget): %s", code, operator.ExitCancelled, errOut)
	}
	job := strings.TrimSpace(out)
	_, out, _ = run(t, "", "status", job, "--json", "--server", url)
	var st salvage.ChunkPage
	if err := json.Unmarshal([]byte(out), &st); err != nil {
		t.Fatal(err)
	}
	if st.Job.CancelReason != "budget exceeded" || st.Job.Summary.Done < 1 || st.Job.Summary.Cancelled < 1 || st.Job.Summary.Cost() <= 0.01 {
		t.Fatalf("job %+v", st.Job)
	}
	code, out, _ = run(t, "", "results", job, "--server", url)
	if code != 0 || strings.Count(out, "\n") < st.Job.Summary.Done {
		t.Fatalf("results of the finished chunks (%d):\n%s", st.Job.Summary.Done, out)
	}
	var envs []salvage.EnvelopeRecord
	salvagetest.Eventually(t, time.Minute, func() bool {
		_, out, _ := run(t, "", "dlq", "ls", "--job", job, "--json", "--server", url)
		return jsonItems(out, &envs) == nil && len(envs) == 1 && envs[0].Status == salvage.EnvelopeEscalated
	}, "one escalated envelope for the job (last %+v)", &envs)
	if e := envs[0]; e.Category != salvage.CategoryBudgetExceeded {
		t.Fatalf("envelope %+v", e)
	}
	_, out, _ = run(t, "", "dlq", "show", envs[0].ID, "--json", "--server", url)
	var d struct {
		Envelope salvage.Envelope `json:"envelope"`
	}
	if err := json.Unmarshal([]byte(out), &d); err != nil || len(d.Envelope.StoppedChunks) != st.Job.Summary.Cancelled {
		t.Fatalf("envelope lists %v; want the %d stopped chunks (%v)", d.Envelope.StoppedChunks, st.Job.Summary.Cancelled, err)
	}
}
