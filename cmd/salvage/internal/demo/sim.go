package demo

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/spf13/cobra"

	"github.com/salvagehq/salvage/cmd/salvage/internal/sim"
	"github.com/salvagehq/salvage/cmd/salvage/internal/simmodel"
)

const simLong = `Serve the simulated external systems order fulfilment calls, and the simulated
model, on a loopback address; print SIM_URL=http://... when ready. Systems honour
Idempotency-Key, answer GET /v1/<system>/effects/<key> (verify) and compensation
requests, inject failures (the rate flags apply to every system; POST /admin/faults
sets them per system, with outages and per-order rules), and list every effect at
GET /ledger. State lives in this process and outlives the workers it serves.

The model (/v1/chat/completions in OpenAI's shape, /v1/messages in Anthropic's) is the
contract-review classifier's stand-in: whatever the prompt, it answers with one risk
score, a digit from 0 to 9, deterministic per prompt and seed, and reports token usage.
A drawn failure is a 429 or 529 with Retry-After, a 500 or 503, a 400, or a timeout: the
request is held for 30 seconds (or until the caller hangs up), then answered 504. A client
whose timeout is longer than that (chatmodel's default is 60 s) sees a 504, not a
timeout: give the model tool a Timeout under 30 s to see timeouts as timeouts.

--model-rpm and --model-tpm give the model a provider's quota: requests and tokens per
minute over a sliding minute, per model name a request gives. A request past it is
answered 429 with Retry-After and Retry-After-Ms; every answer carries the rate-limit
headers OpenAI sends (x-ratelimit-limit-, -remaining-, -reset-requests and -tokens), or
Anthropic's on /v1/messages (anthropic-ratelimit-requests-*, -tokens-*). GET /admin/quota
counts what each model's quota admitted and refused, second by second; POST /admin/faults
sets quotas per model ("quotas": {"model": {"rpm": 600, "tpm": 200000}}).`

// SimCmd is salvage sim: the simulated model and external systems as a
// server of their own.
func (e *Env) SimCmd() *cobra.Command {
	var (
		listen string
		model  simmodel.Config
		faults sim.Faults
		hang   time.Duration
		seed   uint64
		quota  sim.Quota
	)
	cmd := &cobra.Command{
		Use:   "sim",
		Short: "Serve simulated external systems (wms, erp, payments, email, crm) and the model over HTTP",
		Long:  simLong,
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			host, _, err := net.SplitHostPort(listen)
			if err != nil {
				return fmt.Errorf("--listen %q: %w", listen, err)
			}
			if ip := net.ParseIP(host); host != "localhost" && (ip == nil || !ip.IsLoopback()) {
				return fmt.Errorf("--listen %q: the sim serves loopback addresses only", listen)
			}
			m, err := simmodel.New(model)
			if err != nil {
				return err
			}
			if quota.RPM < 0 || quota.TPM < 0 {
				return errors.New("--model-rpm and --model-tpm: want 0 (no limit) or more")
			}
			cfg := sim.Config{Systems: map[string]sim.Faults{}, Hang: hang, Seed: seed}
			if quota != (sim.Quota{}) {
				cfg.Quotas = map[string]sim.Quota{simmodel.ModelName: quota}
			}
			for _, s := range sim.Systems {
				cfg.Systems[s.Name] = faults
			}
			l, err := net.Listen("tcp", listen)
			if err != nil {
				return err
			}
			srv := &http.Server{Handler: sim.Handler(sim.NewState(cfg), m), ReadHeaderTimeout: 5 * time.Second}
			fmt.Fprintf(e.Stdout, "SIM_URL=http://%s\n", l.Addr())
			errc := make(chan error, 1)
			go func() { errc <- srv.Serve(l) }()
			select {
			case err := <-errc:
				return err
			case <-cmd.Context().Done():
			}
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			if err := srv.Shutdown(ctx); err != nil && !errors.Is(err, http.ErrServerClosed) {
				return err
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&listen, "listen", "127.0.0.1:7071", "loopback address to serve on (port 0 picks one)")
	f.Uint64Var(&seed, "seed", 1, "seed of the fault draws")
	f.DurationVar(&hang, "hang", 2*time.Second, "how long an injected timeout hangs")
	f.Float64Var(&faults.ErrorRate, "error-rate", 0, "fraction of effect requests answered 503")
	f.Float64Var(&faults.RateLimitRate, "rate-limit-rate", 0, "fraction answered 429 with Retry-After")
	f.Float64Var(&faults.TimeoutBeforeRate, "timeout-before-rate", 0, "fraction that hang without applying the effect")
	f.Float64Var(&faults.TimeoutAfterRate, "timeout-after-rate", 0, "fraction that apply the effect, then hang past the caller's timeout")
	f.Int64Var(&model.Seed, "model-seed", 1, "simulated model: seed")
	f.DurationVar(&model.Latency, "model-latency", 20*time.Millisecond, "simulated model: median latency")
	f.Float64Var(&model.FailureRate, "model-failure-rate", 0, "simulated model: transient failure fraction")
	f.Float64Var(&model.PermanentRate, "model-permanent-rate", 0, "simulated model: permanent failure fraction")
	f.IntVar(&quota.RPM, "model-rpm", 0, "simulated model: requests a minute its quota admits (0: no limit)")
	f.Int64Var(&quota.TPM, "model-tpm", 0, "simulated model: tokens a minute its quota admits (0: no limit)")
	return cmd
}
