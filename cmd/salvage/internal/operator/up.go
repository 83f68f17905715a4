package operator

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/salvagehq/salvage"
	"github.com/salvagehq/salvage/chatmodel"
	"github.com/salvagehq/salvage/cmd/salvage/internal/contractreview"
	"github.com/salvagehq/salvage/cmd/salvage/internal/dashboard"
	"github.com/salvagehq/salvage/cmd/salvage/internal/orders"
	"github.com/salvagehq/salvage/cmd/salvage/internal/sim"
	"github.com/salvagehq/salvage/cmd/salvage/internal/simmodel"
	"github.com/salvagehq/salvage/cmd/salvage/internal/spec"
	"github.com/salvagehq/salvage/natsconf"
)

// RunFlags are the settings of the roles, shared by up and demo.
type RunFlags struct {
	replicas      int
	partitions    int
	AckWait       time.Duration
	maxDeliver    int
	Concurrency   int
	MaxChunks     int
	ChunkWindow   int
	workerID      string
	retries       int
	retryBase     time.Duration
	retryMax      time.Duration
	retryTotal    time.Duration
	sweepInterval time.Duration
	// unknownWait is how long a job for a never-run pipeline waits.
	unknownWait   time.Duration
	drainTimeout  time.Duration
	JournalWrites string
	SimURL        string
	SimTimeout    time.Duration
	Model         simmodel.Config
	ModelFlags    modelFlags
	pipelinesFile string
	alerts        salvage.AlertRules
	alertInterval time.Duration
	coolDown      time.Duration
	breaker       salvage.BreakerPolicy
	prices        []string
	retention     salvage.Retention
	// auditRetention is SALVAGE_AUDIT's MaxAge (--audit-retention).
	auditRetention time.Duration
	upgrades       []string
	// DemoPipelines registers the built-in demo pipelines (contract-review,
	// and order-fulfillment with SimURL); set before Register, it is the
	// --demo-pipelines flag's default: off for up and provision, on for the
	// demo, chaos and bench.
	DemoPipelines bool
}

// Register adds the role flags to f, with the simulated model's defaults.
func (r *RunFlags) Register(f *pflag.FlagSet, defaults simmodel.Config) {
	f.BoolVar(&r.DemoPipelines, "demo-pipelines", r.DemoPipelines, "register the built-in demo pipelines: contract-review (its model: --model-url, else the --sim's, else simulated in process) and, with --sim, order-fulfillment")
	f.IntVar(&r.replicas, "replicas", 1, "replicas per stream and bucket (3 on a cluster)")
	f.IntVar(&r.partitions, "partitions", 1, "chunk partitions, each with its own chunk stream, claims, checkpoints and journal (their stream leaders spread over a cluster's servers); a deployment never loses one: more adds them, fewer keeps all; running processes find added ones within 30s")
	f.DurationVar(&r.AckWait, "ack-wait", salvage.AckWaitDefault, "tier 2: redeliver a chunk after this long without an ack or heartbeat; a claim lease is two fifths of it, after which a survivor takes a dead worker's chunk over")
	f.IntVar(&r.maxDeliver, "max-deliver", salvage.MaxDeliverDefault, "tier 2: deliveries before a chunk is dead-lettered")
	f.IntVar(&r.Concurrency, "concurrency", salvage.ConcurrencyDefault, "chunks in flight per worker process")
	f.IntVar(&r.MaxChunks, "max-chunks", salvage.MaxChunksDefault, "most chunks one job may split into (a pipeline may set its own); more is rejected as too-many-chunks")
	f.IntVar(&r.ChunkWindow, "chunk-window", salvage.ChunkWindowDefault, "chunks of one job queued at once; the rest wait in SALVAGE_BACKLOG, so a job behind a large one waits for at most this many of its chunks")
	f.StringVar(&r.workerID, "worker-id", "", "worker id in claims and checkpoints (default host-pid-random)")
	f.StringArrayVar(&r.upgrades, "upgrade", nil, "a pipeline definition's fingerprint (salvage pipelines --definitions) this process may register in place of the one its pool runs: the rollout of a new version, once its workers are drained (repeat for several)")
	f.IntVar(&r.retries, "retries", salvage.RetriesDefault, "tier 1: retries per call (attempts = retries+1)")
	f.DurationVar(&r.retryBase, "retry-base", salvage.RetryBaseDefault, "tier 1: upper bound of the first full-jitter wait")
	f.DurationVar(&r.retryMax, "retry-max", salvage.RetryMaxDefault, "tier 1: upper bound of any one wait")
	f.DurationVar(&r.retryTotal, "retry-total", salvage.RetryTotalDefault, "tier 1: time cap for one call, waits included")
	f.DurationVar(&r.sweepInterval, "sweep-interval", salvage.SweepIntervalDefault, "how often the sweeper looks for exhausted chunks")
	f.DurationVar(&r.unknownWait, "unknown-pipeline-wait", salvage.UnknownPipelineWaitDefault, "how long a job for a pipeline no process has ever run waits before it is rejected unknown-pipeline (a registered pipeline's jobs wait for a worker however long)")
	f.DurationVar(&r.drainTimeout, "drain-timeout", salvage.DrainTimeoutDefault, "on SIGTERM, how long in-flight chunks may finish before they are released")
	f.StringVar(&r.SimURL, "sim", "", "URL of a running `salvage sim`: external systems for order-fulfillment and the model for contract-review")
	f.DurationVar(&r.SimTimeout, "sim-timeout", sim.CallTimeoutDefault, "how long a call to the sim may take before it counts as a timeout")
	f.StringVar(&r.pipelinesFile, "pipelines", "", "a YAML or JSON file declaring pipelines whose agents and tools are NATS services (docs/pipelines.md, \"Agents in other languages\"), run next to the built-in ones")
	f.StringVar(&r.ModelFlags.URL, "model-url", "", "base URL of the API of contract-review's model (https://api.openai.com/v1, http://127.0.0.1:11434/v1, https://api.anthropic.com/v1, ...); see --model-api. Default: the sim's, with --sim; else a simulated model in process")
	f.StringVar(&r.ModelFlags.name, "model", "", "the model at --model-url (required with it)")
	f.StringVar(&r.ModelFlags.api, "model-api", string(chatmodel.OpenAI), "the model API: openai (chat completions; key $OPENAI_API_KEY) or anthropic (Messages; key $ANTHROPIC_API_KEY)")
	f.StringArrayVar(&r.ModelFlags.fallbacks, "model-fallback", nil, "contract-review: MODEL or MODEL=URL, a model a call goes to when the one before it is rate-limited, overloaded or its circuit breaker open (repeat for a chain; URL defaults to --model-url or the sim's)")
	f.DurationVar(&r.ModelFlags.timeout, "model-timeout", chatmodel.TimeoutDefault, "how long one attempt of a call to --model-url may take")
	f.DurationVar(&r.coolDown, "cool-down", salvage.CoolDownDefault, "how long chunks whose external system was down wait before they resume")
	f.IntVar(&r.breaker.Failures, "breaker-failures", salvage.BreakerFailuresDefault, "circuit breaker: failures in a row (5xx, timeouts) within --breaker-window that open a system's breaker")
	f.DurationVar(&r.breaker.Window, "breaker-window", salvage.BreakerWindowDefault, "circuit breaker: how far apart those failures may be")
	f.DurationVar(&r.breaker.CoolDown, "breaker-cool-down", salvage.BreakerCoolDownDefault, "circuit breaker: how long it stays open (calls fail at once, chunks are held) before one held chunk is released as the probe")
	f.StringArrayVar(&r.prices, "price", nil, "MODEL=PROMPT,COMPLETION: what a model's tokens cost, in USD per million prompt and completion tokens, for job budgets (repeat per model; e.g. --price gpt-4o=2.5,10)")
	f.IntVar(&r.alerts.BurstCount, "alert-burst", salvage.AlertBurstCountDefault, "alert when this many envelopes arrive within --alert-burst-window")
	f.DurationVar(&r.alerts.BurstWindow, "alert-burst-window", salvage.AlertBurstWindowDefault, "window of the envelope burst alert")
	f.DurationVar(&r.alerts.UnresolvedAfter, "alert-unresolved", salvage.AlertUnresolvedDefault, "alert when an envelope stays unresolved this long")
	f.DurationVar(&r.alerts.UnackedAfter, "alert-unacked", salvage.AlertUnackedDefault, "alert when an escalation involving money, or any COMPENSATION_NEEDED envelope, is not acknowledged this long")
	f.DurationVar(&r.retention.Calls, "keep-calls", salvage.CallsRetentionDefault, "retention: how long after its job finished a done chunk keeps the journal rows of its pure calls (model calls, reads); at most 168h")
	f.DurationVar(&r.retention.Effects, "keep-effects", salvage.EffectsRetentionDefault, "retention: how long after its job finished a done chunk keeps the journal rows of its side effects (keys, outcomes)")
	f.DurationVar(&r.retention.Records, "keep-records", salvage.RecordsRetentionDefault, "retention: how long a finished job's record, its checkpoints, its settled envelopes and the journal of a chunk whose envelope settled are kept")
	f.DurationVar(&r.auditRetention, "audit-retention", salvage.AuditRetentionDefault, "how long SALVAGE_AUDIT keeps an operator action (set when this process provisions)")
	f.DurationVar(&r.alertInterval, "alert-interval", salvage.AlertIntervalDefault, "how often the alert rules are evaluated")
	f.StringVar(&r.JournalWrites, "journal-writes", "auto", "journal rows as atomic group-commit batches (atomic) or pipelined publishes (pipelined); auto: atomic unless an embedded server acks before fsync")
	f.Int64Var(&r.Model.Seed, "model-seed", defaults.Seed, "simulated model: seed")
	f.DurationVar(&r.Model.Latency, "model-latency", defaults.Latency, "simulated model: median call latency")
	f.Float64Var(&r.Model.FailureRate, "model-failure-rate", defaults.FailureRate, "simulated model: fraction of calls failing transiently (429, 5xx, timeout)")
	f.Float64Var(&r.Model.PermanentRate, "model-permanent-rate", defaults.PermanentRate, "simulated model: fraction of calls failing with a permanent 400")
}

// Args renders the flags back for a child process.
func (r *RunFlags) Args() []string {
	args := []string{
		"--ack-wait", r.AckWait.String(), "--max-deliver", strconv.Itoa(r.maxDeliver),
		"--concurrency", strconv.Itoa(r.Concurrency), "--retries", strconv.Itoa(r.retries),
		"--max-chunks", strconv.Itoa(r.MaxChunks), "--chunk-window", strconv.Itoa(r.ChunkWindow),
		"--retry-base", r.retryBase.String(), "--retry-max", r.retryMax.String(), "--retry-total", r.retryTotal.String(),
		"--drain-timeout", r.drainTimeout.String(), "--journal-writes", r.JournalWrites, "--sim", r.SimURL,
		"--sim-timeout", r.SimTimeout.String(), "--cool-down", r.coolDown.String(),
		"--breaker-failures", strconv.Itoa(r.breaker.Failures), "--breaker-window", r.breaker.Window.String(),
		"--breaker-cool-down", r.breaker.CoolDown.String(),
		"--keep-calls", r.retention.Calls.String(), "--keep-effects", r.retention.Effects.String(), "--keep-records", r.retention.Records.String(),
		"--audit-retention", r.auditRetention.String(),
		"--pipelines", r.pipelinesFile, "--model-api", r.ModelFlags.api, "--model-url", r.ModelFlags.URL, "--model", r.ModelFlags.name, "--model-timeout", r.ModelFlags.timeout.String(),
		"--model-seed", strconv.FormatInt(r.Model.Seed, 10), "--model-latency", r.Model.Latency.String(),
		"--model-failure-rate", strconv.FormatFloat(r.Model.FailureRate, 'g', -1, 64),
		"--model-permanent-rate", strconv.FormatFloat(r.Model.PermanentRate, 'g', -1, 64),
		"--demo-pipelines=" + strconv.FormatBool(r.DemoPipelines),
	}
	for _, p := range r.prices {
		args = append(args, "--price", p)
	}
	for _, f := range r.ModelFlags.fallbacks {
		args = append(args, "--model-fallback", f)
	}
	return args
}

// Config turns the flags into the client's Config: this is all cmd/
// decides, the rest is the public API.
//
// The pipelines file's MCP tools are taken through mcp (nil: declared
// only, for a process that calls no tool; see mcpFor).
func (r *RunFlags) Config(roles []salvage.Role, mcp spec.MCP, log zerolog.Logger) (*salvage.Config, error) {
	retries := r.retries
	if retries == 0 {
		retries = -1 // Config reads 0 as "default"; the flag's 0 means none.
	}
	if r.ModelFlags.URL != "" && r.ModelFlags.name == "" {
		return nil, errors.New("--model-url needs --model: the name of the model to call")
	}
	var pipes []*salvage.Pipeline
	if r.DemoPipelines {
		var err error
		if pipes, err = pipelines(r.Model, r.ModelFlags, r.SimURL, r.SimTimeout); err != nil {
			return nil, err
		}
	} else if r.SimURL != "" || r.ModelFlags.URL != "" {
		// Only the demo pipelines call the sim or the model flags' model.
		log.Warn().Str("sim", r.SimURL).Str("model_url", r.ModelFlags.URL).Msg("--sim and --model-url serve the demo pipelines, which run only with --demo-pipelines: nothing in this process calls them")
	}
	var limits []salvage.Limit
	if r.pipelinesFile != "" {
		ctx, cancel := context.WithTimeout(context.Background(), mcpDialTimeout)
		file, err := spec.LoadFile(ctx, r.pipelinesFile, mcp)
		cancel()
		if err != nil {
			return nil, err
		}
		declared := file.Pipelines
		limits = file.Limits
		for _, d := range declared {
			for _, p := range pipes {
				if p.Name == d.Name {
					return nil, fmt.Errorf("%s declares pipeline %s, which is built in", r.pipelinesFile, d.Name)
				}
			}
		}
		pipes = append(pipes, declared...)
	}
	prices, err := parsePrices(r.prices)
	if err != nil {
		return nil, err
	}
	return &salvage.Config{
		Pipelines: pipes, Roles: roles, Replicas: r.replicas, Partitions: r.partitions, AckWait: r.AckWait, MaxDeliver: r.maxDeliver,
		Concurrency: r.Concurrency, WorkerID: r.workerID, MaxChunks: r.MaxChunks, ChunkWindow: r.ChunkWindow,
		Retries: retries, RetryBase: r.retryBase, RetryMax: r.retryMax, RetryTotal: r.retryTotal,
		SweepInterval: r.sweepInterval, UnknownPipelineWait: r.unknownWait, DrainTimeout: r.drainTimeout, JournalWrites: salvage.JournalMode(r.JournalWrites),
		CoolDown: r.coolDown, Breaker: r.breaker, Prices: prices, Alerts: r.alerts, AlertInterval: r.alertInterval, Logger: log,
		Retention: r.retention, AuditRetention: r.auditRetention, Upgrades: r.upgrades, Limits: limits,
	}, nil
}

// mcpDialTimeout bounds connecting to the pipelines file's MCP servers
// and listing their tools.
const mcpDialTimeout = 30 * time.Second

// MCPFor is how a process running roles takes the pipelines file's MCP
// tools: a worker and the recovery orchestrator call tools, so their
// process dials the servers (and the returned func closes them); any
// other process only declares the tools, and starts no server.
func MCPFor(roles []salvage.Role) (spec.MCP, func()) {
	if len(roles) > 0 && !slices.Contains(roles, salvage.RoleWorker) && !slices.Contains(roles, salvage.RoleRecovery) {
		return nil, func() {}
	}
	s := &spec.Servers{}
	return s, func() { _ = s.Close() }
}

// ResolveJournal settles --journal-writes auto for a server whose
// sync_interval is known (embedded) or not (an existing deployment):
// atomic batches unless an embedded server acks before fsync.
func (r *RunFlags) ResolveJournal(embedded bool, sync time.Duration) {
	if r.JournalWrites != "auto" {
		return
	}
	r.JournalWrites = string(salvage.JournalAtomic)
	if embedded && sync != natsconf.SyncAlways {
		r.JournalWrites = string(salvage.JournalPipelined)
	}
}

// upOpts are salvage up's flags.
type upOpts struct {
	run       RunFlags
	httpAddr  string
	httpToken string
	httpHosts []string
	// httpUsers, httpProxy, httpProxyFrom and httpProxyRole are who signs
	// in to the dashboard (dashboard.Config).
	httpUsers, httpProxy, httpProxyRole string
	httpProxyFrom                       []string
	roles                               []string
	listen                              string
	storeDir                            string
	syncStr                             string
	connWait                            time.Duration
}

func (e *Env) upCmd() *cobra.Command {
	var o upOpts
	cmd := &cobra.Command{
		Use:   "up",
		Short: "Run Salvage: an embedded NATS server (unless --server) and every role",
		Long: `Run Salvage. With --server, $NATS_URL, --context or $NATS_CONTEXT it joins that
deployment (and says within seconds when it cannot reach it); with none of them it
embeds a NATS server listening on --listen with its store in --store, which it locks:
a second process on the same store exits at once. Once streams, buckets and roles are
ready it prints NATS_URL=... on stdout. SIGTERM drains: fetching stops, in-flight
chunks finish or are released, then the process exits.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return e.up(cmd, &o) },
	}
	f := cmd.Flags()
	o.run.Register(f, simmodel.Config{Seed: 1, Latency: 20 * time.Millisecond})
	f.StringSliceVar(&o.roles, "role", []string{roleAll}, "roles to run: worker, dead-letter, recovery, api, dashboard or all (comma-separated or repeated)")
	f.StringVar(&o.listen, "listen", fmt.Sprintf("%s:%d", natsconf.HostDefault, natsconf.PortDefault), "embedded server's client address (port 0 picks a free one; NATS_URL=... says which)")
	f.StringVar(&o.storeDir, "store", natsconf.StoreDirDefault, "embedded server's JetStream directory")
	f.StringVar(&o.httpAddr, "http", dashboard.AddrDefault, "dashboard, /api, /metrics and /healthz address (a non-loopback one needs a token)")
	f.StringVar(&o.httpToken, "http-token", "", "token the dashboard requires for replay, resolve and ack (default $"+dashboard.TokenEnv+"; on loopback without one, a random token per process)")
	f.StringVar(&o.httpUsers, "http-users", "", `dashboard users file: one "name role [bcrypt-hash]" a line, role viewer or operator (salvage passwd prints a hash); each signs in with their own password and is named in the audit`)
	f.StringVar(&o.httpProxy, "http-proxy-header", "", "header in which a trusted proxy in front of the dashboard names the signed-in person (e.g. X-Forwarded-User of oauth2-proxy); needs --http-proxy-from")
	f.StringSliceVar(&o.httpProxyFrom, "http-proxy-from", nil, "the trusted proxy's addresses (IPs or CIDRs): the proxy header counts only from them, and is refused from anywhere else")
	f.StringVar(&o.httpProxyRole, "http-proxy-role", string(dashboard.RoleViewer), "role of a person the proxy names whom --http-users does not list: viewer or operator")
	f.StringSliceVar(&o.httpHosts, "http-allowed-hosts", nil, "host names the dashboard answers to besides the --http address, localhost, 127.0.0.1 and ::1 (others get 421: DNS rebinding)")
	f.StringVar(&o.syncStr, "sync-interval", "always", "embedded server's sync_interval: always, default, or a duration")
	f.DurationVar(&o.connWait, "connect-timeout", natsconf.ConnectTimeoutDefault, "when joining a deployment, how long to wait for it to be reachable before giving up")
	return cmd
}

// up runs salvage up: it embeds a server or joins one, starts the client's
// roles (and the dashboard), prints NATS_URL=... and blocks until its
// context ends, then drains.
func (e *Env) up(cmd *cobra.Command, o *upOpts) error {
	log, err := e.Logger()
	if err != nil {
		return err
	}
	clientRoles, dash, err := resolveRoles(o.roles)
	if err != nil {
		return err
	}
	sync, err := natsconf.ParseSyncInterval(o.syncStr)
	if err != nil {
		return err
	}
	embedded, err := e.embedding(cmd, o, log)
	if err != nil {
		return err
	}
	o.run.ResolveJournal(embedded, sync)
	mcp, closeMCP := MCPFor(clientRoles)
	// Deferred first, so it runs after the roles stop: a draining worker
	// may still call the servers.
	defer closeMCP()
	cfg, err := o.run.Config(clientRoles, mcp, log)
	if err != nil {
		return err
	}
	ctx := cmd.Context()
	tp, stopTracing, err := StartTracing(ctx, log)
	if err != nil {
		return err
	}
	// Deferred first, so it runs last: after the roles stop.
	defer stopTracing()
	cfg.TracerProvider = tp
	url := e.conn.ResolveURL()
	if embedded {
		srv, err := embedServer(o.listen, o.storeDir, sync)
		if err != nil {
			return err
		}
		defer srv.Shutdown()
		url = srv.ClientURL()
		e.conn.NoContext = true
		log.Info().Str("url", url).Str("store", o.storeDir).Str("sync_interval", natsconf.SyncIntervalString(sync)).Msg("embedded NATS server ready")
	}
	js, closeConn, err := e.joinDeployment(ctx, url, o.connWait, log)
	if err != nil {
		return err
	}
	defer closeConn()
	client, err := salvage.NewClient(js, cfg)
	if err != nil {
		return err
	}
	// An existing deployment may still be electing leaders or
	// reconnecting: Start's provisioning waits that out.
	pctx, cancel := context.WithTimeout(ctx, o.connWait)
	err = client.Start(e.refused.watch(pctx))
	cancel()
	if err != nil {
		return fmt.Errorf("start on %s: %w", url, e.explain(err))
	}
	if !o.run.DemoPipelines {
		warnDemoPipelines(ctx, client, cfg.Pipelines, log)
	}
	var srv *dashboard.Server
	if dash {
		if srv, err = startDashboard(js, client, o, log); err != nil {
			_ = client.Stop(context.WithoutCancel(ctx))
			return err
		}
	}
	fmt.Fprintf(e.Stdout, "NATS_URL=%s\n", url)
	var dashErr error
	if srv != nil {
		dashErr = srv.Run(ctx)
	} else {
		<-ctx.Done()
	}
	// SIGTERM: the client drains its worker (DrainTimeout), then every
	// role stops.
	return errors.Join(dashErr, client.Stop(context.WithoutCancel(ctx)))
}

// embedding says whether up embeds a server: only when nothing names a
// deployment to join. Flags win over the environment: --listen or --store
// asks for an embedded server even with $NATS_URL or $NATS_CONTEXT set;
// together with --server or --context they contradict.
func (e *Env) embedding(cmd *cobra.Command, o *upOpts, log zerolog.Logger) (bool, error) {
	embedFlags := cmd.Flags().Changed("listen") || cmd.Flags().Changed("store")
	joinFlags := cmd.Flags().Changed("server") || cmd.Flags().Changed("context")
	if embedFlags && joinFlags {
		return false, errors.New("--listen and --store configure an embedded server; --server and --context join an existing one: give one or the other")
	}
	embedded := embedFlags || e.conn.URL == "" && e.conn.ContextName() == "" && os.Getenv("NATS_URL") == ""
	if embedded && embedFlags && (os.Getenv("NATS_URL") != "" || e.conn.ContextName() != "") {
		log.Info().Str("listen", o.listen).Str("store", o.storeDir).Msg("--listen/--store given: embedding a server; $NATS_URL and $NATS_CONTEXT are ignored")
	}
	return embedded, nil
}

// embedServer starts the embedded server on listen (port 0: a free one)
// with its store in storeDir.
func embedServer(listen, storeDir string, sync time.Duration) (*natsconf.Server, error) {
	host, portStr, err := net.SplitHostPort(listen)
	if err != nil {
		return nil, fmt.Errorf("--listen %q: %w", listen, err)
	}
	port, err := strconv.Atoi(portStr)
	if err != nil || port < -1 || port > 65535 {
		return nil, fmt.Errorf("--listen %q: bad port", listen)
	}
	if port == 0 {
		port = -1 // a free port, printed as NATS_URL
	}
	sc := natsconf.DefaultServerConfig()
	sc.Host, sc.Port, sc.StoreDir, sc.SyncInterval = host, port, storeDir, sync
	return natsconf.StartServer(sc)
}

// joinDeployment connects to url and waits up to connWait for it to be
// reachable; a refused request is logged and recorded, so that a start
// waiting for it fails saying why.
func (e *Env) joinDeployment(ctx context.Context, url string, connWait time.Duration, log zerolog.Logger) (jetstream.JetStream, func(), error) {
	e.conn.URL = url
	e.conn.Wait = true
	e.conn.OnPermissionViolation = func(err error) {
		// A refused request is only one nobody answers: say why, and
		// fail a start that waits for it.
		log.Error().Err(err).Msg("the server refused this user; check its permissions")
		e.refused.record(err)
	}
	var lastErr natsconf.LastConnError
	e.conn.OnConnectError = lastErr.Record
	nc, js, err := e.Connect("salvage up")
	if err != nil {
		return nil, nil, err
	}
	if err := natsconf.AwaitConnected(ctx, nc, url, connWait, &lastErr, func(waited time.Duration, lastErr error) {
		log.Warn().Str("url", url).Dur("waited_ms", waited).AnErr("last_error", lastErr).Msg("NATS server not reachable yet; still trying")
	}); err != nil {
		nc.Close()
		return nil, nil, err
	}
	return js, nc.Close, nil
}

// startDashboard listens on --http with the token (--http-token, else
// $SALVAGE_DASHBOARD_TOKEN).
func startDashboard(js jetstream.JetStream, client *salvage.Client, o *upOpts, log zerolog.Logger) (*dashboard.Server, error) {
	token := o.httpToken
	if token == "" {
		token = os.Getenv(dashboard.TokenEnv)
	}
	cfg := dashboard.Config{Addr: o.httpAddr, Token: token, AllowedHosts: o.httpHosts, Logger: &log,
		ProxyHeader: o.httpProxy, ProxyRole: dashboard.Role(o.httpProxyRole)}
	if o.httpUsers != "" {
		users, err := dashboard.LoadUsers(o.httpUsers)
		if err != nil {
			return nil, err
		}
		cfg.Users = users
	}
	for _, p := range o.httpProxyFrom {
		prefix, err := parsePrefix(p)
		if err != nil {
			return nil, fmt.Errorf("--http-proxy-from %q: %w", p, err)
		}
		cfg.ProxyFrom = append(cfg.ProxyFrom, prefix)
	}
	srv, err := dashboard.Listen(js, client, cfg)
	if err != nil {
		return nil, err
	}
	log.Info().Str("url", srv.URL()).Bool("token_configured", token != "").Int("users", len(cfg.Users)).Str("proxy_header", cfg.ProxyHeader).Msg("dashboard ready")
	return srv, nil
}

// parsePrefix reads an IP or a CIDR: an IP is a prefix of one address.
func parsePrefix(s string) (netip.Prefix, error) {
	if strings.Contains(s, "/") {
		return netip.ParsePrefix(s)
	}
	a, err := netip.ParseAddr(s)
	if err != nil {
		return netip.Prefix{}, err
	}
	return netip.PrefixFrom(a, a.BitLen()), nil
}

// parsePrices reads --price MODEL=PROMPT,COMPLETION flags.
func parsePrices(flags []string) (map[string]salvage.Price, error) {
	if len(flags) == 0 {
		return nil, nil
	}
	out := map[string]salvage.Price{}
	for _, f := range flags {
		model, rest, ok := strings.Cut(f, "=")
		in, outp, ok2 := strings.Cut(rest, ",")
		if !ok || !ok2 || model == "" {
			return nil, fmt.Errorf("--price %q: want MODEL=PROMPT,COMPLETION (USD per million tokens)", f)
		}
		p, err1 := strconv.ParseFloat(in, 64)
		c, err2 := strconv.ParseFloat(outp, 64)
		if err1 != nil || err2 != nil || p < 0 || c < 0 {
			return nil, fmt.Errorf("--price %q: prices must be numbers, not negative", f)
		}
		out[model] = salvage.Price{Prompt: p, Completion: c}
	}
	return out, nil
}

// warnDemoPipelines tells a deployment upgraded from a salvage up that
// registered the built-in demo pipelines by default that this process,
// started without --demo-pipelines, does not run them: their jobs wait
// for a process that does.
func warnDemoPipelines(ctx context.Context, c *salvage.Client, runs []*salvage.Pipeline, log zerolog.Logger) {
	ps, err := c.PipelineList(ctx)
	if err != nil {
		return // the warning is a courtesy; the listing's refusal is not this process's failure
	}
	for _, p := range ps {
		if p.Pipeline != contractreview.Name && p.Pipeline != orders.Name || slices.ContainsFunc(runs, func(r *salvage.Pipeline) bool { return r.Name == p.Pipeline }) {
			continue
		}
		log.Warn().Str("pipeline", p.Pipeline).Msg("the built-in demo pipeline " + p.Pipeline +
			" is registered in this deployment (salvage up ran the demo pipelines by default before); this process does not run it (start it with --demo-pipelines to run it)")
	}
}
