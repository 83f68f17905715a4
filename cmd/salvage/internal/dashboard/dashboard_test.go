package dashboard_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/salvagehq/salvage"
	"github.com/salvagehq/salvage/cmd/salvage/internal/dashboard"
	"github.com/salvagehq/salvage/kv"
	"github.com/salvagehq/salvage/salvagetest"
	"github.com/salvagehq/salvage/salvagetype"
	"github.com/salvagehq/salvage/streams"
)

type fixture struct {
	b      *salvagetest.Server
	stores *kv.Stores
	url    string
	envID  string
}

// setup provisions a server with one job of three chunks (two done, one
// dead-lettered), its envelope in SALVAGE_DLQ, and journal rows, and starts
// the dashboard on a free loopback port.
func setup(t *testing.T, token string) *fixture {
	t.Helper()
	return setupWith(t, dashboard.Config{Token: token})
}

// setupWith is setup with the dashboard's configuration (its Addr is a
// free loopback port).
func setupWith(t *testing.T, cfg dashboard.Config) *fixture {
	t.Helper()
	b := salvagetest.StartServer(t)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	if err := streams.Provision(ctx, b.JS, streams.Options{}); err != nil {
		t.Fatal(err)
	}
	stores, err := kv.Provision(ctx, b.JS, kv.Options{})
	if err != nil {
		t.Fatal(err)
	}
	job := "01JDASHBOARD00000000000000"
	if err := stores.Jobs.Create(ctx, kv.Job{Job: salvagetype.Job{ID: job, Pipeline: "order-fulfillment", Chunks: 3}}); err != nil {
		t.Fatal(err)
	}
	// A finished job answers from its record alone: no checkpoints
	// needed. It finished 75 s after it was created.
	finished := time.Now().Add(75 * time.Second)
	if err := stores.Jobs.Create(ctx, kv.Job{Job: salvagetype.Job{ID: "01JFINISHED000000000000000", Pipeline: "contract-review", Chunks: 4, Status: salvagetype.JobDone, FinishedAt: &finished, Summary: salvagetype.Summary{Done: 4, Tier1Retries: 1, Redeliveries: 2}}}); err != nil {
		t.Fatal(err)
	}
	for i, status := range []salvagetype.ChunkStatus{salvagetype.ChunkDone, salvagetype.ChunkDone, salvagetype.ChunkDeadLettered} {
		var d kv.Delta
		if _, err := stores.Parts()[0].Checkpoints.Mutate(ctx, job, i+1, func(cp *kv.Checkpoint) error {
			cp.Status, cp.Tier1Retries, cp.Deliveries, cp.Redeliveries = status, 2, uint64(i+1), i
			cp.Record(salvagetype.ChunkEvent{Kind: salvagetype.EventDelivered, Delivery: uint64(i + 1), Worker: "w-fixture", Stage: 1})
			d = cp.Recount()
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		if _, _, err := stores.Jobs.Apply(ctx, job, d); err != nil {
			t.Fatal(err)
		}
	}
	for i, st := range []salvagetype.CallStatus{salvagetype.CallSucceeded, salvagetype.CallSucceeded, salvagetype.CallFailed} {
		row := kv.JournalRow{Call: salvagetype.Call{Key: kv.JournalKey(job, 3, 0, 1, "billing", i+1), Job: job, Chunk: 3, Stage: 1, Agent: "billing", Seq: i + 1, Tool: "charge-payment", System: "payments", Status: st, LatencyMS: 12, StartedAt: time.Now().Add(time.Duration(i) * time.Millisecond)}}
		if _, err := stores.Parts()[0].Journal.Put(ctx, row, 0); err != nil {
			t.Fatal(err)
		}
	}
	env := salvagetype.Envelope{ID: "01JENVELOPE000000000000000", Job: job, Chunk: 3, Pipeline: "order-fulfillment",
		Category: salvagetype.CategoryTransientNetwork, Strategy: salvagetype.StrategyResume, CreatedAt: time.Now().Add(-time.Minute),
		Original: salvagetype.OriginalMessage{Stream: streams.Chunks, Seq: 9, Subject: streams.ChunkRef{Pipeline: "order-fulfillment", Job: job, Chunk: 3}.Subject(),
			Data: json.RawMessage(`{"job_id":"` + job + `","chunk":3,"pipeline":"order-fulfillment","epoch":0,"input":{}}`)}}
	data, _ := json.Marshal(env)
	ack, err := b.JS.PublishMsg(ctx, &nats.Msg{Subject: streams.ChunkRef{Pipeline: env.Pipeline, Job: job, Chunk: 3}.DLQ(env.Category), Data: data})
	if err != nil {
		t.Fatal(err)
	}
	if err := stores.Envelopes.Put(ctx, kv.EnvelopeRecord{EnvelopeRecord: salvagetype.EnvelopeRecord{ID: env.ID, Job: job, Chunk: 3, Category: env.Category, Strategy: env.Strategy, Status: salvagetype.EnvelopeOpen, DLQSeq: ack.Sequence, CreatedAt: env.CreatedAt}}); err != nil {
		t.Fatal(err)
	}
	client, err := salvage.NewClient(b.JS, nil)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Addr = "127.0.0.1:0"
	srv, err := dashboard.Listen(b.JS, client, cfg)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { defer close(done); _ = srv.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	return &fixture{b: b, stores: stores, url: srv.URL(), envID: env.ID}
}

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

// scrape reads /metrics into "name,label=value,..." keys (labels sorted by
// name, as the exposition format has them).
func scrape(t *testing.T, url string) map[string]float64 {
	t.Helper()
	code, body := get(t, url+"/metrics")
	if code != 200 {
		t.Fatalf("/metrics: %d", code)
	}
	parser := expfmt.NewTextParser(model.LegacyValidation)
	families, err := parser.TextToMetricFamilies(strings.NewReader(body))
	if err != nil {
		t.Fatalf("/metrics does not parse: %v", err)
	}
	values := map[string]float64{}
	for name, fam := range families {
		for _, m := range fam.GetMetric() {
			// key names every label; all sums over the pipeline label of
			// counters and gauges, and over every label of histograms.
			key, all := name, name
			for _, l := range m.GetLabel() {
				key += "," + l.GetName() + "=" + l.GetValue()
				if l.GetName() != "pipeline" && m.GetHistogram() == nil {
					all += "," + l.GetName() + "=" + l.GetValue()
				}
			}
			switch {
			case m.GetGauge() != nil:
				values[key] = m.GetGauge().GetValue()
			case m.GetCounter() != nil:
				values[key] = m.GetCounter().GetValue()
			case m.GetHistogram() != nil:
				values[key+",count"] = float64(m.GetHistogram().GetSampleCount())
				values[key+",sum"] = m.GetHistogram().GetSampleSum()
				all += ",count"
			}
			if all != key && all != key+",count" {
				switch {
				case m.GetGauge() != nil:
					values[all] += m.GetGauge().GetValue()
				case m.GetCounter() != nil:
					values[all] += m.GetCounter().GetValue()
				case m.GetHistogram() != nil:
					values[all] += float64(m.GetHistogram().GetSampleCount())
				}
			}
		}
	}
	return values
}

func TestMetricsParseAndMatchTheStreams(t *testing.T) {
	t.Parallel()
	f := setup(t, "")
	var values map[string]float64
	salvagetest.Eventually(t, time.Minute, func() bool {
		values = scrape(t, f.url)
		// The journal watcher catches up asynchronously, and one scrape
		// collects the histogram and the counts concurrently.
		return values["salvage_calls_total,status=SUCCEEDED,tool=charge-payment"] == 2 && values["salvage_calls_total,status=FAILED,tool=charge-payment"] == 1 &&
			values["salvage_call_duration_seconds,count"] == 3 && values["salvage_job_duration_seconds,count"] == 1
	}, "call metrics from the journal")
	want := map[string]float64{
		"salvage_dlq_depth":                                     1, // the one open envelope
		"salvage_dlq_unacknowledged":                            0,
		"salvage_auto_recovery_rate":                            0, // its chunk is not recovered yet
		"salvage_envelopes_total,category=TRANSIENT_NETWORK":    1,
		"salvage_chunks_total,status=done":                      6, // 2 running + 4 finished
		"salvage_chunks_total,status=dead-lettered":             1,
		"salvage_tier1_retries_total":                           7, // 6 running + 1 finished
		"salvage_redeliveries_total":                            5, // 0, 1, 2 running; 2 finished
		"salvage_calls_total,status=FAILED,tool=charge-payment": 1,
		"salvage_call_duration_seconds,count":                   3,
		// By pipeline, tool and system.
		"salvage_chunks_total,pipeline=order-fulfillment,status=done":             2,
		"salvage_chunks_total,pipeline=order-fulfillment,status=dead-lettered":    1,
		"salvage_chunks_total,pipeline=contract-review,status=done":               4,
		"salvage_jobs_finished_total,pipeline=contract-review,status=done":        1,
		"salvage_jobs,pipeline=contract-review,status=done":                       1,
		"salvage_call_duration_seconds,system=payments,tool=charge-payment,count": 3,
		"salvage_job_duration_seconds,pipeline=contract-review,status=done,count": 1,
		// The running job has no duration yet.
		"salvage_job_duration_seconds,count": 1,
	}
	for k, v := range want {
		if values[k] != v {
			t.Errorf("%s = %v, want %v", k, values[k], v)
		}
	}
	if d := values["salvage_job_duration_seconds,pipeline=contract-review,status=done,sum"]; d < 74 || d > 76 {
		t.Errorf("the finished job's duration = %v s, want 75", d)
	}
	if values["salvage_dlq_oldest_unresolved_seconds"] < 59 {
		t.Errorf("oldest unresolved = %v s, want about 60", values["salvage_dlq_oldest_unresolved_seconds"])
	}
}

func post(t *testing.T, url string, headers map[string]string) (int, string) {
	t.Helper()
	return request(t, http.MethodPost, url, "", headers)
}

// request sends method to url with headers and, when host is set, that
// Host header; it returns the status and body.
func request(t *testing.T, method, url, host string, headers map[string]string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest(method, url, strings.NewReader("{}"))
	if host != "" {
		req.Host = host
	}
	for k, v := range headers {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

func TestMutationsNeedTheTokenAndTheSameOrigin(t *testing.T) {
	t.Parallel()
	f := setup(t, "s3cret")
	replay := f.url + "/api/envelopes/" + f.envID + "/replay"
	unchanged := func() {
		t.Helper()
		rec, _, err := f.stores.Envelopes.Get(context.Background(), f.envID)
		if err != nil || rec.Replays != 0 || rec.Status != salvagetype.EnvelopeOpen {
			t.Fatalf("a refused request changed the envelope: %+v %v", rec, err)
		}
	}
	host := strings.TrimPrefix(f.url, "http://")
	for name, h := range map[string]map[string]string{
		"no token":             {"Origin": f.url},
		"wrong token":          {dashboard.TokenHeader: "guess", "Origin": f.url},
		"cross-origin":         {dashboard.TokenHeader: "s3cret", "Origin": "http://evil.example"},
		"cross-site fetch":     {dashboard.TokenHeader: "s3cret", "Sec-Fetch-Site": "cross-site"},
		"other port same host": {dashboard.TokenHeader: "s3cret", "Origin": "http://" + strings.Split(host, ":")[0] + ":1"},
	} {
		if code, body := post(t, replay, h); code != http.StatusForbidden {
			t.Errorf("%s: %d %s, want 403", name, code, body)
		}
		unchanged()
	}
	if code, _ := get(t, replay); code != http.StatusMethodNotAllowed {
		t.Errorf("GET on a mutation: %d, want 405", code)
	}
	unchanged()
	code, body := post(t, replay, map[string]string{dashboard.TokenHeader: "s3cret", "Origin": f.url})
	if code != http.StatusOK {
		t.Fatalf("authorized replay: %d %s", code, body)
	}
	if rec, _, _ := f.stores.Envelopes.Get(context.Background(), f.envID); rec.Replays != 1 || !rec.Requeued {
		t.Fatalf("replay not recorded: %+v", rec)
	}
	if code, _ := post(t, f.url+"/api/envelopes/NOPE/ack", map[string]string{dashboard.TokenHeader: "s3cret"}); code != http.StatusNotFound {
		t.Errorf("unknown envelope: %d, want 404", code)
	}
}

// TestRefusedReplayIsAConflict: the page's replay of an envelope whose
// job was cancelled is refused with a 409 that says why, and changes
// nothing.
func TestRefusedReplayIsAConflict(t *testing.T) {
	t.Parallel()
	f := setup(t, "s3cret")
	ctx := context.Background()
	rec, _, err := f.stores.Envelopes.Get(ctx, f.envID)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.stores.Jobs.Cancel(ctx, rec.Job); err != nil {
		t.Fatal(err)
	}
	code, body := post(t, f.url+"/api/envelopes/"+f.envID+"/replay", map[string]string{dashboard.TokenHeader: "s3cret", "Origin": f.url})
	if code != http.StatusConflict || !strings.Contains(body, "refused") || !strings.Contains(body, "cancelled") {
		t.Fatalf("replay of a cancelled job's envelope: %d %s, want a 409 saying why", code, body)
	}
	if after, _, _ := f.stores.Envelopes.Get(ctx, f.envID); after.Replays != 0 || after.Requeued || after.Status != rec.Status {
		t.Fatalf("a refused replay changed the envelope: %+v", after)
	}
}

func TestReadViewsAndHealth(t *testing.T) {
	t.Parallel()
	f := setup(t, "")
	if code, _ := get(t, f.url+"/healthz"); code != 200 {
		t.Fatalf("/healthz %d", code)
	}
	code, page := get(t, f.url+"/")
	if code != 200 || !regexp.MustCompile(`name="salvage-token" content="[0-9a-f]{32}"`).MatchString(page) || !strings.Contains(page, `data-testid="dlq-depth"`) {
		t.Fatalf("page %d lacks its token or views", code)
	}
	var sum dashboard.Summary
	_, body := get(t, f.url+"/api/summary")
	if err := json.Unmarshal([]byte(body), &sum); err != nil || sum.DLQDepth != 1 || sum.ByCategory[string(salvagetype.CategoryTransientNetwork)] != 1 || len(sum.Jobs) != 1 {
		t.Fatalf("summary = %+v, %v", sum, err)
	}
	_, body = get(t, f.url+"/api/envelopes/"+f.envID)
	if !strings.Contains(body, `"journal"`) || !strings.Contains(body, `"original"`) {
		t.Fatalf("envelope detail = %s", body)
	}
	// Ids that cannot be keys are a 400, unknown ones a 404: never a 500.
	for id, want := range map[string]int{"NOPE": 404, "a:b": 400, "j%C3%B6b": 400, "job%231": 400} {
		if code, body := get(t, f.url+"/api/envelopes/"+id); code != want {
			t.Errorf("/api/envelopes/%s: %d %s, want %d", id, code, body, want)
		}
	}
}

func TestNonLoopbackNeedsAToken(t *testing.T) {
	t.Parallel()
	b := salvagetest.StartServer(t)
	if _, err := dashboard.Listen(b.JS, nil, dashboard.Config{Addr: "0.0.0.0:0"}); !errors.Is(err, dashboard.ErrNeedsToken) {
		t.Fatalf("err = %v, want ErrNeedsToken", err)
	}
}

// TestDNSRebindingRefused: a page on evil.example whose name now resolves
// to 127.0.0.1 sends Host: evil.example. Nothing is served to it — not the
// page with its token, not the JSON, not a mutation, even one carrying the
// token and a matching Origin.
func TestDNSRebindingRefused(t *testing.T) {
	t.Parallel()
	f := setup(t, "s3cret")
	port := f.url[strings.LastIndexByte(f.url, ':')+1:]
	do := func(method, path, host string, h map[string]string) (int, string) {
		t.Helper()
		return request(t, method, f.url+path, host, h)
	}
	evil := "evil.example:" + port
	for _, path := range []string{"/", "/api/summary", "/api/envelopes", "/api/envelopes/" + f.envID, "/metrics", "/healthz"} {
		if code, body := do(http.MethodGet, path, evil, nil); code != http.StatusMisdirectedRequest || strings.Contains(body, "salvage-token") {
			t.Errorf("GET %s with Host %s: %d, want 421", path, evil, code)
		}
	}
	if code, _ := do(http.MethodPost, "/api/envelopes/"+f.envID+"/replay", evil, map[string]string{dashboard.TokenHeader: "s3cret", "Origin": "http://" + evil}); code != http.StatusMisdirectedRequest {
		t.Errorf("rebound replay: %d, want 421", code)
	}
	if rec, _, _ := f.stores.Envelopes.Get(context.Background(), f.envID); rec.Replays != 0 {
		t.Fatalf("a rebound request replayed the envelope: %+v", rec)
	}
	for _, host := range []string{"localhost:" + port, "127.0.0.1:" + port, "LOCALHOST:" + port} {
		if code, _ := do(http.MethodGet, "/api/summary", host, map[string]string{dashboard.TokenHeader: "s3cret"}); code != http.StatusOK {
			t.Errorf("Host %s: %d, want 200", host, code)
		}
	}
	// An origin that is not an allowed host is refused even when the Host is.
	if code, _ := do(http.MethodPost, "/api/envelopes/"+f.envID+"/ack", "127.0.0.1:"+port, map[string]string{dashboard.TokenHeader: "s3cret", "Origin": "http://evil.example:" + port}); code != http.StatusForbidden {
		t.Errorf("cross-origin ack: %d, want 403", code)
	}
}

// TestAllowedHosts: --http-allowed-hosts adds names the dashboard answers to.
func TestAllowedHosts(t *testing.T) {
	t.Parallel()
	b := salvagetest.StartServer(t)
	if _, err := kv.Provision(context.Background(), b.JS, kv.Options{}); err != nil {
		t.Fatal(err)
	}
	client, err := salvage.NewClient(b.JS, nil)
	if err != nil {
		t.Fatal(err)
	}
	srv, err := dashboard.Listen(b.JS, client, dashboard.Config{Addr: "127.0.0.1:0", AllowedHosts: []string{"salvage.internal"}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = srv.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	for host, want := range map[string]int{"salvage.internal:7070": 200, "salvage.internal": 200, "other.internal": 421} {
		req, _ := http.NewRequest(http.MethodGet, srv.URL()+"/", nil)
		req.Host = host
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Errorf("Host %s: %d, want %d", host, resp.StatusCode, want)
		}
	}
}

// TestCountersNeverGoBack: a replay turns the dead-lettered chunk done and
// rewrites its FAILED row as SUCCEEDED. Counters count events, so neither
// salvage_chunks_total{status="dead-lettered"} nor the FAILED calls drop
// (they used to, breaking rate()); the depth gauge follows the open
// envelopes down, and an escalation waiting for a person keeps the
// oldest-unresolved gauge up.
func TestCountersNeverGoBack(t *testing.T) {
	t.Parallel()
	f := setup(t, "")
	ctx := context.Background()
	job := "01JDASHBOARD00000000000000"
	failedRow := kv.JournalKey(job, 3, 0, 1, "billing", 3)
	salvagetest.Eventually(t, time.Minute, func() bool {
		v := scrape(t, f.url)
		return v["salvage_calls_total,status=FAILED,tool=charge-payment"] == 1 && v["salvage_chunks_total,status=dead-lettered"] == 1
	}, "the first counts")

	// The replay: chunk 3 runs again and finishes; its call succeeds.
	var d kv.Delta
	if _, err := f.stores.Parts()[0].Checkpoints.Mutate(ctx, job, 3, func(cp *kv.Checkpoint) error {
		cp.Status = salvagetype.ChunkDone
		d = cp.Recount()
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := f.stores.Jobs.Apply(ctx, job, d); err != nil {
		t.Fatal(err)
	}
	row, err := f.stores.Parts()[0].Journal.Get(ctx, failedRow)
	if err != nil {
		t.Fatal(err)
	}
	next := row.JournalRow
	next.CarryHistory(row.JournalRow)
	next.Status, next.Error = salvagetype.CallSucceeded, ""
	if _, err := f.stores.Parts()[0].Journal.Put(ctx, next, row.Seq); err != nil {
		t.Fatal(err)
	}
	if _, err := f.stores.Envelopes.Mutate(ctx, f.envID, func(r *kv.EnvelopeRecord) error {
		r.Status, r.ResolvedBy = salvagetype.EnvelopeResolved, "chunk"
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	var v map[string]float64
	salvagetest.Eventually(t, time.Minute, func() bool {
		v = scrape(t, f.url)
		return v["salvage_calls_total,status=SUCCEEDED,tool=charge-payment"] == 3 && v["salvage_chunks_total,status=done"] == 7 && v["salvage_dlq_depth"] == 0
	}, "the replay's counts (last: %v)", v)
	for k, want := range map[string]float64{
		"salvage_calls_total,status=FAILED,tool=charge-payment":                     1,
		"salvage_chunks_total,status=dead-lettered":                                 1,
		"salvage_recoveries_total,outcome=resolved,strategy=RESUME_FROM_CHECKPOINT": 1,
		"salvage_auto_recovery_rate":                                                1,
	} {
		if v[k] != want {
			t.Errorf("after the replay %s = %v, want %v", k, v[k], want)
		}
	}

	// Seven escalations wait for a person, the oldest for ten minutes.
	for i := range 7 {
		if err := f.stores.Envelopes.Put(ctx, kv.EnvelopeRecord{EnvelopeRecord: salvagetype.EnvelopeRecord{ID: fmt.Sprintf("01JESCALATED%014d", i), Job: job, Chunk: 10 + i, Category: salvagetype.CategoryCompensationNeeded, Strategy: salvagetype.StrategyEscalate, Status: salvagetype.EnvelopeEscalated, CreatedAt: time.Now().Add(-time.Duration(10-i) * time.Minute)}}); err != nil {
			t.Fatal(err)
		}
	}
	salvagetest.Eventually(t, time.Minute, func() bool {
		v = scrape(t, f.url)
		return v["salvage_dlq_depth"] == 7
	}, "seven open escalations (last: %v)", v)
	if v["salvage_dlq_oldest_unresolved_seconds"] < 590 || v["salvage_dlq_unacknowledged"] != 7 {
		t.Errorf("oldest unresolved %v s (want about 600), unacknowledged %v (want 7)", v["salvage_dlq_oldest_unresolved_seconds"], v["salvage_dlq_unacknowledged"])
	}
}

// TestEnvelopeListingIsPaged: /api/envelopes answers one bounded page with
// the total, newest first on request, and refuses a bad offset.
func TestEnvelopeListingIsPaged(t *testing.T) {
	t.Parallel()
	f := setup(t, "")
	ctx := context.Background()
	for i := range 5 {
		id := fmt.Sprintf("01JPAGED%018d", i)
		if err := f.stores.Envelopes.Put(ctx, kv.EnvelopeRecord{EnvelopeRecord: salvagetype.EnvelopeRecord{ID: id, Job: "01JDASHBOARD00000000000000", Chunk: 3, Category: salvagetype.CategoryTransientNetwork, Strategy: salvagetype.StrategyResume, Status: salvagetype.EnvelopeResolved, CreatedAt: time.Now().Add(time.Duration(i) * time.Second)}}); err != nil {
			t.Fatal(err)
		}
	}
	var list salvage.EnvelopeList
	salvagetest.Eventually(t, time.Minute, func() bool {
		_, body := get(t, f.url+"/api/envelopes?newest=1&limit=2")
		return json.Unmarshal([]byte(body), &list) == nil && list.Total == 6
	}, "six envelopes listed")
	if len(list.Envelopes) != 2 || list.Envelopes[0].ID != "01JPAGED000000000000000004" || list.NextOffset != 2 {
		t.Errorf("newest page = %+v", list)
	}
	_, body := get(t, f.url+"/api/envelopes?status=resolved&offset=4")
	list = salvage.EnvelopeList{}
	if err := json.Unmarshal([]byte(body), &list); err != nil || list.Total != 5 || len(list.Envelopes) != 1 || list.Envelopes[0].ID != "01JPAGED000000000000000004" || list.NextOffset != 0 {
		t.Errorf("last page of the resolved ones = %+v, %v", list, err)
	}
	if code, _ := get(t, f.url+"/api/envelopes?offset=-1"); code != http.StatusBadRequest {
		t.Errorf("offset=-1 answered %d, want 400", code)
	}
}

// TestModelTokensAreCountedOncePerCall: salvage_model_tokens_total adds up
// the usage journal rows carry, by model and kind, each call once even
// when its row is written again.
func TestModelTokensAreCountedOncePerCall(t *testing.T) {
	t.Parallel()
	f := setup(t, "")
	ctx := context.Background()
	job := "01JDASHBOARD00000000000000"
	for i, model := range []string{"gpt-test", "gpt-test", "local-llm"} {
		row := kv.JournalRow{Call: salvagetype.Call{Key: kv.JournalKey(job, 1, 0, 1, "analyst", i+1), Tool: "model", Status: salvagetype.CallSucceeded, LatencyMS: 5, Usage: &salvagetype.Usage{Model: model, PromptTokens: 100, CompletionTokens: 7}}}
		seq, err := f.stores.Parts()[0].Journal.Put(ctx, row, 0)
		if err != nil {
			t.Fatal(err)
		}
		if i == 0 {
			// The same call's row written again (a later flag on it).
			row.Orphan = true
			if _, err := f.stores.Parts()[0].Journal.Put(ctx, row, seq); err != nil {
				t.Fatal(err)
			}
		}
	}
	var v map[string]float64
	salvagetest.Eventually(t, time.Minute, func() bool {
		v = scrape(t, f.url)
		return v["salvage_model_tokens_total,kind=prompt,model=local-llm"] == 100
	}, "token metrics from the journal")
	want := map[string]float64{
		"salvage_model_tokens_total,kind=prompt,model=gpt-test":      200,
		"salvage_model_tokens_total,kind=completion,model=gpt-test":  14,
		"salvage_model_tokens_total,kind=completion,model=local-llm": 7,
	}
	for k, n := range want {
		if v[k] != n {
			t.Errorf("%s = %v, want %v", k, v[k], n)
		}
	}
}
