package dashboard_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/salvagehq/salvage"
	"github.com/salvagehq/salvage/cmd/salvage/internal/dashboard"
	"github.com/salvagehq/salvage/kv"
	"github.com/salvagehq/salvage/salvagetest"
	"github.com/salvagehq/salvage/salvagetype"
	"github.com/salvagehq/salvage/streams"
)

// TestBreakersInSummaryAndMetrics: an open breaker and the chunks it
// holds show in /api/summary and as gauges and a counter in /metrics.
func TestBreakersInSummaryAndMetrics(t *testing.T) {
	t.Parallel()
	f := setup(t, "")
	ctx := context.Background()
	if _, _, err := f.stores.Breakers.Mutate(ctx, "crm", "test", func(b *kv.Breaker) error {
		b.Open(salvagetype.BreakerPolicy{}, time.Now(), "503")
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := f.b.JS.CreateOrUpdateConsumer(ctx, streams.Hold, jetstream.ConsumerConfig{Durable: streams.System("crm").HoldConsumer(),
		FilterSubject: streams.System("crm").Held(), AckPolicy: jetstream.AckExplicitPolicy}); err != nil {
		t.Fatal(err)
	}
	for c := 1; c <= 2; c++ {
		if _, err := f.b.JS.Publish(ctx, streams.ChunkRef{Job: "01JDASHBOARD00000000000000", Chunk: c}.Hold("crm"), []byte(`{}`)); err != nil {
			t.Fatal(err)
		}
	}
	var v map[string]float64
	salvagetest.Eventually(t, time.Minute, func() bool {
		v = scrape(t, f.url)
		return v["salvage_held_chunks,system=crm"] == 2
	}, "held chunks in /metrics (last %v)", &v)
	for k, want := range map[string]float64{
		"salvage_breaker_state,state=open,system=crm":      1,
		"salvage_breaker_state,state=closed,system=crm":    0,
		"salvage_breaker_state,state=half-open,system=crm": 0,
		"salvage_breaker_opens_total,system=crm":           1,
	} {
		if v[k] != want {
			t.Errorf("%s = %v, want %v", k, v[k], want)
		}
	}
	_, body := get(t, f.url+"/api/summary")
	var sum dashboard.Summary
	if err := json.Unmarshal([]byte(body), &sum); err != nil {
		t.Fatal(err)
	}
	if sum.Held != 2 || len(sum.Breakers) != 1 || sum.Breakers[0].State != salvage.BreakerOpen {
		t.Fatalf("summary breakers %+v, held %d", sum.Breakers, sum.Held)
	}
}

// TestPauseFromTheDashboard: a pause needs the token, names a known
// pipeline, and shows in /api/pipelines and /metrics.
func TestPauseFromTheDashboard(t *testing.T) {
	t.Parallel()
	f := setup(t, "secret")
	ctx := context.Background()
	if err := f.stores.Pipelines.Register(ctx, "order-fulfillment"); err != nil {
		t.Fatal(err)
	}
	if code, _ := post(t, f.url+"/api/pipelines/order-fulfillment/pause", nil); code != http.StatusForbidden {
		t.Fatalf("pause without the token: %d", code)
	}
	auth := map[string]string{dashboard.TokenHeader: "secret"}
	for path, want := range map[string]int{
		"/api/pipelines/no-such-pipeline/pause":   http.StatusNotFound,
		"/api/pipelines/order-fulfillment/freeze": http.StatusNotFound,
		"/api/pipelines/bad%3Ename/pause":         http.StatusBadRequest,
	} {
		if code, body := post(t, f.url+path, auth); code != want {
			t.Errorf("POST %s: %d %s; want %d", path, code, body, want)
		}
	}
	if code, body := post(t, f.url+"/api/pipelines/order-fulfillment/pause", auth); code != http.StatusOK || !strings.Contains(body, `"paused":true`) {
		t.Fatalf("pause: %d %s", code, body)
	}
	_, body := request(t, http.MethodGet, f.url+"/api/pipelines", "", auth)
	var ps []salvage.PipelineStatus
	if err := json.Unmarshal([]byte(body), &ps); err != nil || len(ps) != 1 || !ps[0].Paused || ps[0].PausedBy != "token" {
		t.Fatalf("/api/pipelines: %s", body)
	}
	var v map[string]float64
	salvagetest.Eventually(t, time.Minute, func() bool {
		v = scrape(t, f.url)
		return v["salvage_pipeline_paused,pipeline=order-fulfillment"] == 1
	}, "salvage_pipeline_paused in /metrics (last %v)", &v)
	if code, body := post(t, f.url+"/api/pipelines/order-fulfillment/resume", auth); code != http.StatusOK || !strings.Contains(body, `"paused":false`) {
		t.Fatalf("resume: %d %s", code, body)
	}
	salvagetest.Eventually(t, time.Minute, func() bool {
		v = scrape(t, f.url)
		return v["salvage_pipeline_paused,pipeline=order-fulfillment"] == 0
	}, "salvage_pipeline_paused back to 0 (last %v)", &v)
}

// TestHistoryIsKeptByTheServer: /api/history serves the sampled counters
// and the last hour's envelope arrivals per minute, whatever tab asks.
func TestHistoryIsKeptByTheServer(t *testing.T) {
	t.Parallel()
	f := setup(t, "")
	var h dashboard.History
	salvagetest.Eventually(t, time.Minute, func() bool {
		_, body := get(t, f.url+"/api/history")
		return json.Unmarshal([]byte(body), &h) == nil && len(h.Points) > 0 && h.Points[len(h.Points)-1].Envelopes == 1
	}, "a sample with the fixture's envelope (last %+v)", &h)
	p := h.Points[len(h.Points)-1]
	if p.Tier1Retries != 7 || p.Redeliveries != 5 || p.DLQDepth != 1 || h.IntervalSeconds != 10 {
		t.Fatalf("point %+v, interval %d", p, h.IntervalSeconds)
	}
	total := 0
	for _, n := range h.EnvelopesPerMinute {
		total += n
	}
	// The fixture's envelope was created a minute ago.
	if len(h.EnvelopesPerMinute) != 60 || total != 1 || (h.EnvelopesPerMinute[58] != 1 && h.EnvelopesPerMinute[57] != 1) {
		t.Fatalf("envelopes per minute %v", h.EnvelopesPerMinute)
	}
}

// TestJobListAndPage: /api/jobs lists by status tab and search, newest
// first, with counts per status; a job's page and a chunk's timeline
// answer; an unknown status is refused.
func TestJobListAndPage(t *testing.T) {
	t.Parallel()
	f := setup(t, "")
	var list dashboard.JobList
	_, body := get(t, f.url+"/api/jobs")
	if err := json.Unmarshal([]byte(body), &list); err != nil || list.Total != 2 || list.Counts["running"] != 1 || list.Counts["done"] != 1 {
		t.Fatalf("jobs %s: %v", body, err)
	}
	_, body = get(t, f.url+"/api/jobs?status=done")
	if err := json.Unmarshal([]byte(body), &list); err != nil || list.Total != 1 || list.Jobs[0].ID != "01JFINISHED000000000000000" {
		t.Fatalf("done jobs %s: %v", body, err)
	}
	_, body = get(t, f.url+"/api/jobs?q=dashboard")
	list = dashboard.JobList{}
	if err := json.Unmarshal([]byte(body), &list); err != nil || list.Total != 1 || list.Jobs[0].ID != "01JDASHBOARD00000000000000" {
		t.Fatalf("search %s: %v", body, err)
	}
	// The tabs count what the search finds, not every job.
	if list.Counts["running"] != 1 || list.Counts["done"] != 0 {
		t.Fatalf("counts under a search: %v", list.Counts)
	}
	if code, _ := get(t, f.url+"/api/jobs?status=finished"); code != http.StatusBadRequest {
		t.Fatalf("unknown status answered %d", code)
	}
	if code, body := get(t, f.url+"/api/jobs/01JDASHBOARD00000000000000"); code != http.StatusOK || !strings.Contains(body, `"chunks"`) {
		t.Fatalf("job page %d %s", code, body)
	}
	if code, _ := get(t, f.url+"/api/jobs/01JNOSUCHJOB00000000000000"); code != http.StatusNotFound {
		t.Fatalf("unknown job answered %d", code)
	}
	code, body := get(t, f.url+"/api/jobs/01JDASHBOARD00000000000000/chunks/3/trace")
	var tc struct {
		salvage.TraceChunk
		Timeline []struct {
			Kind, Status string
			Failed       bool
		} `json:"timeline"`
	}
	if err := json.Unmarshal([]byte(body), &tc); err != nil || code != http.StatusOK || len(tc.Calls) != 3 || len(tc.Timeline) != 4 ||
		tc.Timeline[0].Kind != string(salvage.EventDelivered) || tc.Timeline[3].Status != string(salvage.CallFailed) || !tc.Timeline[3].Failed {
		t.Fatalf("chunk trace %d %s: %v", code, body, err)
	}
}

// TestLimitsInMetrics: a declared limit and what a process holds of it
// show in /metrics and the summary; a bound not declared is not reported.
func TestLimitsInMetrics(t *testing.T) {
	t.Parallel()
	f := setup(t, "")
	ctx := context.Background()
	if _, err := f.stores.Limits.Set(ctx, salvagetype.Limit{Key: "system.crm", RequestsPerMinute: 600, InFlight: 4}, "ann"); err != nil {
		t.Fatal(err)
	}
	if _, err := f.stores.Limits.MutateShares(ctx, "system.crm", func(sh *kv.LimitShares) error {
		sh.Shares["w1"] = kv.LimitShare{RequestsPerMinute: 150, InFlight: 1, Wants: true, Expires: time.Now().Add(time.Hour)}
		sh.PausedUntil = time.Now().Add(time.Hour)
		sh.AddRefused(time.Now(), 3)
		sh.AddRefused(time.Now().Add(-time.Hour), 5) // past the window
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	var v map[string]float64
	salvagetest.Eventually(t, time.Minute, func() bool {
		v = scrape(t, f.url)
		return v["salvage_limit_held,bound=requests_per_minute,key=system.crm"] == 150
	}, "the held share in /metrics (last %v)", &v)
	for k, want := range map[string]float64{
		"salvage_limit,bound=requests_per_minute,key=system.crm": 600,
		"salvage_limit,bound=in_flight,key=system.crm":           4,
		"salvage_limit_held,bound=in_flight,key=system.crm":      1,
		"salvage_limit_holders,key=system.crm,waiting=true":      1,
		"salvage_limit_holders,key=system.crm,waiting=false":     0,
		"salvage_limit_paused,key=system.crm":                    1,
		"salvage_limit_recent_429s,key=system.crm":               3,
	} {
		if v[k] != want {
			t.Errorf("%s = %v, want %v", k, v[k], want)
		}
	}
	if _, ok := v["salvage_limit,bound=tokens_per_minute,key=system.crm"]; ok {
		t.Errorf("a bound not declared is reported: %v", v)
	}
	_, body := get(t, f.url+"/api/summary")
	var sum dashboard.Summary
	if err := json.Unmarshal([]byte(body), &sum); err != nil || len(sum.Limits) != 1 || sum.Limits[0].Holders != 1 || sum.Limits[0].SetBy != "ann" {
		t.Fatalf("summary limits %+v, %v", sum.Limits, err)
	}
}
