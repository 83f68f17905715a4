package demo

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/salvagehq/salvage"
	"github.com/salvagehq/salvage/cmd/salvage/internal/operator"
)

// truthCheck is chaos's last check: for every job, whether what each
// reader says of its counts — its record's summary, the sum over its
// chunks, the salvage.api service, the dashboard and /metrics — is what
// its journal says, after every kill, restart and operator action.
type truthCheck struct {
	// JournalCalls and JournalTokens are the run's jobs' journal rows
	// and the tokens they carry.
	JournalCalls  int   `json:"journal_calls"`
	JournalTokens int64 `json:"journal_tokens"`
	// Disagreements name each count a reader got wrong (at most
	// disagreementsMax).
	Disagreements []string `json:"disagreements,omitempty"`
}

const disagreementsMax = 20

func (t *truthCheck) disagree(format string, args ...any) {
	if len(t.Disagreements) < disagreementsMax {
		t.Disagreements = append(t.Disagreements, fmt.Sprintf(format, args...))
	}
}

// checkTruth compares, job by job, the journal (every call of every
// epoch, from Trace) with the job's summary, the sum over its chunks, the
// service's answer and the dashboard's; then the dashboard's /metrics
// with the job records and the journal. dash is the dashboard that ran
// through the whole run ("" when none did).
func checkTruth(ctx context.Context, d *Deployment, dash string, jobs []string) truthCheck {
	var t truthCheck
	byStatus := map[string]int{}
	for _, id := range jobs {
		j, chunks, err := operator.AllChunks(ctx, d.Client, id)
		if err != nil {
			t.disagree("job %s: %v", id, err)
			continue
		}
		byStatus[string(j.Status)]++
		tr, err := d.Client.JobTrace(ctx, id)
		if err != nil {
			t.disagree("job %s: trace: %v", id, err)
			continue
		}
		var rows, sumCalls int
		var tokens, sumTokens int64
		for _, c := range tr.Chunks {
			rows += len(c.Calls)
			for _, call := range c.Calls {
				if u := call.Usage; u != nil {
					tokens += u.PromptTokens + u.CompletionTokens
				}
			}
		}
		for _, c := range chunks {
			sumCalls += c.Calls
			sumTokens += c.PromptTokens + c.CompletionTokens
		}
		t.JournalCalls += rows
		t.JournalTokens += tokens
		summaryTokens := j.Summary.PromptTokens + j.Summary.CompletionTokens
		if sumCalls != rows || sumTokens != tokens || summaryTokens != tokens {
			t.disagree("job %s: journal %d calls and %d tokens; its chunks %d and %d; its summary %d tokens", id, rows, tokens, sumCalls, sumTokens, summaryTokens)
		}
		var api salvage.ChunkPage
		if err := operator.RequestOn(ctx, d.JS.Conn(), "jobs.status", map[string]any{"job_id": id, "limit": 1}, &api); err != nil {
			t.disagree("job %s: salvage.api jobs.status: %v", id, err)
		} else if api.Job.Status != j.Status || api.Job.Summary != j.Summary {
			t.disagree("job %s: salvage.api says %s %+v, its record %s %+v", id, api.Job.Status, api.Job.Summary, j.Status, j.Summary)
		}
		if dash != "" {
			var page salvage.ChunkPage
			if err := GetJSON(ctx, dash+"/api/jobs/"+id+"?limit=1", &page); err != nil {
				t.disagree("job %s: the dashboard: %v", id, err)
			} else if page.Job.Status != j.Status || page.Job.Summary != j.Summary {
				t.disagree("job %s: the dashboard says %s %+v, its record %s %+v", id, page.Job.Status, page.Job.Summary, j.Status, j.Summary)
			}
		}
	}
	if dash == "" {
		return t
	}
	// The dashboard's metrics come from its watch of the records: they
	// agree once it has caught up with the last write.
	var why string
	deadline := time.Now().Add(30 * time.Second)
	for {
		why = metricsDisagree(ctx, dash, byStatus, t.JournalTokens)
		if why == "" || time.Now().After(deadline) || ctx.Err() != nil {
			break
		}
		time.Sleep(250 * time.Millisecond)
	}
	if why != "" {
		t.disagree("/metrics: %s", why)
	}
	return t
}

// metricsDisagree reads the dashboard's /metrics and says how salvage_jobs
// differs from byStatus (the run's jobs by status) or the model tokens
// from tokens; "" when they agree.
func metricsDisagree(ctx context.Context, dash string, byStatus map[string]int, tokens int64) string {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, dash+"/metrics", nil)
	if err != nil {
		return err.Error()
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err.Error()
	}
	defer resp.Body.Close()
	jobs := map[string]int{}
	var modelTokens int64
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		name, value, ok := strings.Cut(line, " ")
		if !ok || strings.HasPrefix(line, "#") {
			continue
		}
		v, err := strconv.ParseFloat(value, 64)
		if err != nil {
			continue
		}
		switch {
		case strings.HasPrefix(name, "salvage_jobs{"):
			if _, status, ok := strings.Cut(name, `status="`); ok {
				jobs[strings.TrimSuffix(status, `"}`)] += int(v)
			}
		case strings.HasPrefix(name, "salvage_model_tokens_total{"):
			modelTokens += int64(v)
		}
	}
	for status, n := range byStatus {
		if jobs[status] != n {
			return fmt.Sprintf("salvage_jobs says %v, the records %v", jobs, byStatus)
		}
	}
	if modelTokens != tokens {
		return fmt.Sprintf("salvage_model_tokens_total says %d, the journal %d", modelTokens, tokens)
	}
	return ""
}

// GetJSON GETs url and decodes its JSON answer into out; with out nil it
// reads the answer and drops it.
func GetJSON(ctx context.Context, url string, out any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	if out == nil {
		_, err = io.Copy(io.Discard, resp.Body)
		return err
	}
	return json.NewDecoder(resp.Body).Decode(out)
}
