package bench

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/spf13/pflag"

	"github.com/salvagehq/salvage"
	"github.com/salvagehq/salvage/chatmodel"
	"github.com/salvagehq/salvage/cmd/salvage/internal/contractreview"
	"github.com/salvagehq/salvage/cmd/salvage/internal/demo"
	"github.com/salvagehq/salvage/cmd/salvage/internal/sim"
	"github.com/salvagehq/salvage/cmd/salvage/internal/simmodel"
)

// The limits rows (issue 36): limitsWorkers worker processes of
// limitsSlots slots against a simulated provider whose model admits
// limitsRPM requests and limitsTPM tokens a minute, one contract-review
// job of about 2,000 calls, without a limit declared and with one.
const (
	limitsWorkers = 4
	limitsSlots   = 32
	limitsRPM     = 600
	limitsTPM     = 200_000
	// limitsTimeout bounds a row: without a limit, calls refused wait
	// out the provider's minute, some more than once.
	limitsTimeout = 10 * time.Minute
)

// limitsRow is one run of the limits rows.
type limitsRow struct {
	Limited  bool    `json:"limit_declared"`
	Workers  int     `json:"workers"`
	Slots    int     `json:"slots_per_worker"`
	Chunks   int     `json:"chunks"`
	WallSecs float64 `json:"wall_seconds"`
	// Admitted, Refused and Tokens are the provider's counts (the sim's
	// quota); MostInAMinute the most requests sent in any minute.
	Admitted      int   `json:"admitted"`
	Refused       int   `json:"refused_429"`
	Tokens        int64 `json:"tokens"`
	MostInAMinute int   `json:"most_sent_in_a_minute"`
	// PerMinute is the admitted calls a minute over the run, Share that
	// over the quota.
	PerMinute float64 `json:"admitted_per_minute"`
	Share     float64 `json:"share_of_quota"`
	// Tier1Retries and Redeliveries are the job's, from its record.
	Tier1Retries int    `json:"tier1_retries"`
	Redeliveries int    `json:"redeliveries"`
	Status       string `json:"job_status"`
}

// limitsVerdict holds the limited row to the bars of issue 36: 429s at
// most 1% of the calls, and at least 90% of the quota used.
func limitsVerdict(rows []limitsRow) string {
	for _, r := range rows {
		if !r.Limited {
			continue
		}
		calls := max(r.Admitted+r.Refused, 1)
		refused := float64(r.Refused) / float64(calls)
		return fmt.Sprintf("with the limit: 429s %.1f%% of requests (<= 1%%) %s; %.0f%% of the quota used (>= 90%%) %s",
			100*refused, verdict(refused <= 0.01), 100*r.Share, verdict(r.Share >= 0.9))
	}
	return "-"
}

// limits runs the limits rows on nats-server binary: without a limit,
// then with one.
func (b *bench) limits(ctx context.Context, binary string) ([]limitsRow, error) {
	var rows []limitsRow
	for _, limited := range []bool{false, true} {
		row, err := b.limitsRow(ctx, binary, limited)
		if err != nil {
			return rows, fmt.Errorf("limit declared %v: %w", limited, err)
		}
		rows = append(rows, row)
	}
	return rows, nil
}

func (b *bench) limitsRow(ctx context.Context, binary string, limited bool) (row limitsRow, err error) {
	row = limitsRow{Limited: limited, Workers: limitsWorkers, Slots: limitsSlots, Chunks: b.o.limitsChunks}
	fs, err := startFleetServer(binary, map[string]sim.Quota{simmodel.ModelName: {RPM: limitsRPM, TPM: limitsTPM}}, fleetLatency)
	if err != nil {
		return row, err
	}
	defer fs.stop()
	simc := &sim.Client{BaseURL: fs.simURL, Timeout: 10 * time.Second}

	var o demo.Opts
	o.Run.DemoPipelines = true
	o.Run.Register(pflag.NewFlagSet("bench", pflag.ContinueOnError), simmodel.Config{Seed: 1, Latency: fleetLatency})
	o.Run.SimURL = fs.simURL
	o.Run.Concurrency = limitsSlots
	o.Run.ChunkWindow = max(o.Run.ChunkWindow, 2*limitsWorkers*limitsSlots)
	o.Run.JournalWrites = string(salvage.JournalAtomic)

	client, _, stopClient, err := b.startDeadLetter(ctx, o, fs.url)
	if err != nil {
		return row, err
	}
	defer stopClient()
	if limited {
		// The model tool's system, as chatmodel names it from the URL.
		tool, err := chatmodel.New(contractreview.ModelTool, chatmodel.Config{BaseURL: strings.TrimSuffix(fs.simURL, "/") + "/v1", Model: simmodel.ModelName})
		if err != nil {
			return row, err
		}
		if _, err := client.LimitSet(ctx, salvage.Limit{Key: salvage.LimitKey(salvage.LimitSystem, tool.System),
			RequestsPerMinute: limitsRPM, TokensPerMinute: limitsTPM}, "bench"); err != nil {
			return row, err
		}
	}
	var workers []*demo.Worker
	defer func() { demo.StopWorkers(workers) }()
	for i := range limitsWorkers {
		w, err := b.e.StartWorker(ctx, o, fs.url, fmt.Sprintf("limits-w%d", i+1))
		if w != nil {
			workers = append(workers, w)
		}
		if err != nil {
			return row, err
		}
	}
	b.log.Info().Bool("limited", limited).Msg("limits: running the job")
	start := time.Now()
	id, err := client.JobSubmit(ctx, contractreview.Name, contractreview.Input{Text: contractreview.Contract(b.o.limitsChunks, 1)}, nil)
	if err != nil {
		return row, err
	}
	wctx, cancel := context.WithTimeout(ctx, limitsTimeout)
	defer cancel()
	job, err := client.JobWait(wctx, id)
	row.WallSecs = time.Since(start).Seconds()
	if err != nil {
		row.Status = "not finished after " + limitsTimeout.String()
	} else {
		row.Status = string(job.Status)
	}
	if j, gerr := client.JobGet(ctx, id); gerr == nil {
		row.Tier1Retries, row.Redeliveries = j.Summary.Tier1Retries, j.Summary.Redeliveries
	}
	use, err := simc.Quota(ctx)
	if err != nil {
		return row, err
	}
	u := use[simmodel.ModelName]
	row.Admitted, row.Refused, row.Tokens = u.Admitted, u.Refused, u.Tokens
	row.MostInAMinute, _ = u.MaxMinute()
	row.PerMinute = 60 * float64(row.Admitted) / row.WallSecs
	row.Share = row.PerMinute / limitsRPM
	return row, nil
}
