package dashboard_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/salvagehq/salvage/kv"
	"github.com/salvagehq/salvage/salvagetype"
	"github.com/salvagehq/salvage/streams"
)

// The walk's job: 120 orders, order 117 killed mid-charge, held at the
// email breaker, failed for good at the email, its charge refunded.
const (
	walkJob      = "01JWALK0000000000000000000"
	walkChunk    = 117
	walkEnvelope = "01JWALKENVELOPE00000000000"
)

// addWalkJob writes the records a worker and the orchestrator leave for
// the walk's job, event by event as they write them (the CLI's tests make
// them for real: TestOrderRecovery kills a worker mid-charge and
// compensates, TestOutageHoldsOrdersInsteadOfDeadLettering holds chunks at
// a breaker, and check `salvage trace` explains each): 119 chunks done;
// chunk 117 taken by w-1, which was killed after the charge began,
// redelivered to w-2 after AckWait, the charge verified, held while the
// email breaker was open, released, failed permanently at the email,
// dead-lettered and its charge compensated.
func addWalkJob(t *testing.T, f *fixture) {
	t.Helper()
	ctx := context.Background()
	t0 := time.Now().Add(-5 * time.Minute).UTC()
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	if err := f.stores.Jobs.Create(ctx, kv.Job{Job: salvagetype.Job{ID: walkJob, Pipeline: "order-fulfillment", Chunks: 120, Status: salvagetype.JobIncomplete, Summary: salvagetype.Summary{Done: 119, DeadLettered: 1, DeadLetters: 1, Redeliveries: 2}}}); err != nil {
		t.Fatal(err)
	}
	for n := 1; n <= 120; n++ {
		if n == walkChunk {
			continue
		}
		if _, err := f.stores.Parts()[0].Checkpoints.Mutate(ctx, walkJob, n, func(cp *kv.Checkpoint) error {
			cp.Status, cp.Stage, cp.Deliveries = salvagetype.ChunkDone, 3, 1
			cp.Record(salvagetype.ChunkEvent{Kind: salvagetype.EventDelivered, At: at(0), Delivery: 1, Worker: "w-1", Stage: 1})
			cp.Record(salvagetype.ChunkEvent{Kind: salvagetype.EventDone, At: at(1), Worker: "w-1", Stage: 3})
			return nil
		}); err != nil {
			t.Fatal(err)
		}
	}
	key := func(stage int, agent string) string { return kv.JournalKey(walkJob, walkChunk, 0, stage, agent, 1) }
	stock, charge, email := key(1, "stock"), key(2, "billing"), key(3, "notify")
	rows := []kv.JournalRow{
		{Call: salvagetype.Call{Key: stock, Stage: 1, Agent: "stock", Tool: "check-stock", Status: salvagetype.CallSucceeded, Attempts: 1, LatencyMS: 40, StartedAt: at(0.2), FinishedAt: at(0.24)}},
		{Call: salvagetype.Call{Key: charge, Stage: 2, Agent: "billing", Tool: "charge-payment", System: "payments", Status: salvagetype.CallCompensated, Verified: true, Attempts: 1, LatencyMS: 30, StartedAt: at(30.7), FinishedAt: at(30.73), Fingerprint: &salvagetype.Fingerprint{System: "payments", ResourceID: "ch_117", Reversible: true, Compensation: "refund-payment"}, History: []salvagetype.CallAttempt{{Status: salvagetype.CallInitiated, StartedAt: at(0.5)}}}},
		{Call: salvagetype.Call{Key: email, Stage: 3, Agent: "notify", Tool: "send-email", System: "email", Status: salvagetype.CallFailed, Attempts: 1, LatencyMS: 80, Error: "422 mailbox unavailable", ErrorClass: "permanent", ErrorStatus: 422, StartedAt: at(48.7), FinishedAt: at(48.78)}},
	}
	for i, r := range rows {
		r.Job, r.Chunk, r.Seq, r.IdempotencyKey = walkJob, walkChunk, 1, fmt.Sprintf("idem-%d", i)
		if _, err := f.stores.Parts()[0].Journal.Put(ctx, r, 0); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := f.stores.Parts()[0].Checkpoints.Mutate(ctx, walkJob, walkChunk, func(cp *kv.Checkpoint) error {
		cp.Status, cp.Stage, cp.Deliveries, cp.Redeliveries, cp.Holds, cp.Compensated = salvagetype.ChunkDeadLettered, 3, 3, 2, 1, true
		cp.Envelope, cp.Reason, cp.LastError = walkEnvelope, "send-email: 422 mailbox unavailable", "422 mailbox unavailable"
		for _, ev := range []salvagetype.ChunkEvent{
			{Kind: salvagetype.EventDelivered, At: at(0), Delivery: 1, Worker: "w-1", Stage: 1},
			{Kind: salvagetype.EventDelivered, At: at(30.6), Delivery: 2, Worker: "w-2", Stage: 2},
			{Kind: salvagetype.EventHeld, At: at(31), Stage: 3, Detail: "email"},
			{Kind: salvagetype.EventDelivered, At: at(48.6), Delivery: 3, Worker: "w-2", Stage: 3},
			{Kind: salvagetype.EventDeadLettered, At: at(49), Delivery: 3, Stage: 3, Detail: walkEnvelope},
			{Kind: salvagetype.EventCompensated, At: at(50), Worker: "orchestrator", Stage: 2, Detail: "refund-payment undid charge-payment ch_117"},
		} {
			cp.Record(ev)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	env := salvagetype.Envelope{ID: walkEnvelope, Job: walkJob, Chunk: walkChunk, Pipeline: "order-fulfillment",
		Category: salvagetype.CategoryPartialExecution, Strategy: salvagetype.StrategyCompensateAndAbandon,
		Error: "send-email: 422 mailbox unavailable", ErrorClass: "permanent", FailedTool: "send-email", FailedAgent: "notify", FailedCall: email, FailedStage: 3,
		Deliveries: 3, CompletedEntries: []string{stock, charge}, InFlightEntries: []string{}, PendingCompensations: []string{charge},
		Checkpoint: salvagetype.EnvelopeCheckpoint{Stage: 3, Status: salvagetype.ChunkRunning}, CreatedAt: at(49),
		Original: salvagetype.OriginalMessage{Stream: streams.Chunks, Seq: 500, Subject: streams.ChunkRef{Pipeline: "order-fulfillment", Job: walkJob, Chunk: walkChunk}.Subject(),
			Data: json.RawMessage(fmt.Sprintf(`{"job_id":%q,"chunk":%d,"pipeline":"order-fulfillment","epoch":0,"input":{"order":"o-117"}}`, walkJob, walkChunk))}}
	data, _ := json.Marshal(env)
	ack, err := f.b.JS.PublishMsg(ctx, &nats.Msg{Subject: streams.ChunkRef{Pipeline: env.Pipeline, Job: walkJob, Chunk: walkChunk}.DLQ(env.Category), Data: data})
	if err != nil {
		t.Fatal(err)
	}
	if err := f.stores.Envelopes.Put(ctx, kv.EnvelopeRecord{EnvelopeRecord: salvagetype.EnvelopeRecord{ID: walkEnvelope, Job: walkJob, Chunk: walkChunk, Category: env.Category, Strategy: env.Strategy, Status: salvagetype.EnvelopeAbandoned, DLQSeq: ack.Sequence, CreatedAt: env.CreatedAt, Notes: []string{"compensated charge-payment ch_117 with refund-payment"}}}); err != nil {
		t.Fatal(err)
	}
}

// TestOperatorWalkInABrowser walks what an operator does at 3 a.m., at
// 1,280 and 1,920 pixels, every click a real mouse click: the job list's
// incomplete tab; the job; its chunks filtered to the failed one; page 2
// of its chunks; chunk 117's timeline, which explains the kill, the hold
// and the compensation; the envelope with its reason; a replay, asked
// first; "Replay failed…" from the job list, which then finds nothing
// left to replay (the replay is not sent twice). With SALVAGE_SCREENSHOTS
// set it saves the job page with the timeline and the envelope page at
// each width (make screenshots: docs/screenshots).
func TestOperatorWalkInABrowser(t *testing.T) {
	t.Parallel()
	for _, width := range []int64{1280, 1920} {
		t.Run(fmt.Sprint(width), func(t *testing.T) {
			t.Parallel()
			f := setup(t, "")
			addWalkJob(t, f)
			ctx := browse(t, f.url+"/")
			step, cancel := context.WithTimeout(ctx, 3*time.Minute)
			defer cancel()
			asked := acceptDialogs(ctx)
			poll := func(what, js string) {
				t.Helper()
				if _, err := chromedp.Run(step, chromedp.Poll[bool](js)); err != nil {
					t.Fatalf("%s: %v", what, err)
				}
			}
			if err := chromedp.Do(step, chromedp.EmulateViewport(width, 1000), chromedp.Reload()); err != nil {
				t.Fatal(err)
			}
			settle(t, step)
			// The job list: the incomplete tab shows the walk's job alone.
			tab := `#job-tabs button[data-status="incomplete"]`
			poll("the incomplete tab counts one job", `(document.querySelector('`+tab+`') || {}).textContent === 'incomplete (1)'`)
			if err := click(step, tab); err != nil {
				t.Fatal(err)
			}
			poll("the list shows the incomplete job alone", `document.querySelectorAll('#job-list tr').length === 1 && document.querySelector('#job-list tr').dataset.job === '`+walkJob+`'`)
			// The list's paging, a job a page: all three jobs, newest first,
			// then back; then the incomplete tab again.
			if _, err := chromedp.Run(step, chromedp.Evaluate[bool](`jobLimit = 1; jobStatus = ''; jobOffset = 0; loadJobs(); true`)); err != nil {
				t.Fatal(err)
			}
			poll("a list of one job a page", `document.querySelectorAll('#job-list tr').length === 1 && document.querySelector('#job-list tr').dataset.job === '`+walkJob+`'`)
			var pages []string
			for _, b := range []string{"older", "older", "newer", "newer"} {
				before, _ := chromedp.Run(step, chromedp.Evaluate[string](`document.querySelector('#job-list tr').dataset.job`))
				if err := click(step, `#job-paging button[data-page="`+b+`"]`); err != nil {
					t.Fatal(err)
				}
				poll("the list after "+b, `document.querySelector('#job-list tr')?.dataset.job !== '`+before+`'`)
				now, _ := chromedp.Run(step, chromedp.Evaluate[string](`document.querySelector('#job-list tr').dataset.job`))
				pages = append(pages, now)
			}
			if len(pages) != 4 || pages[1] == pages[0] || pages[2] != pages[0] || pages[3] != walkJob {
				t.Fatalf("paging went %v; want two older jobs, then back to %s", pages, walkJob)
			}
			if _, err := chromedp.Run(step, chromedp.Evaluate[bool](`jobLimit = 50; true`)); err != nil {
				t.Fatal(err)
			}
			if err := click(step, tab); err != nil {
				t.Fatal(err)
			}
			poll("the incomplete tab again", `document.querySelectorAll('#job-list tr').length === 1 && document.querySelector('#job-list tr').dataset.job === '`+walkJob+`'`)
			if err := click(step, `#job-list tr[data-job="`+walkJob+`"] a`); err != nil {
				t.Fatal(err)
			}
			poll("the job page's first 100 chunks", `document.getElementById('jp-range').textContent === 'chunks 1–100 of 120'`)
			// Filter: the failed chunk alone.
			if err := chromedp.Do(step, chromedp.SetValue(`#jp-filter`, "failed")); err != nil {
				t.Fatal(err)
			}
			if _, err := chromedp.Run(step, chromedp.Evaluate[bool](`document.getElementById('jp-filter').dispatchEvent(new Event('change'))`)); err != nil {
				t.Fatal(err)
			}
			poll("the failed filter", `document.querySelectorAll('#jp-chunks tr').length === 1 && document.querySelector('#jp-chunks tr').dataset.chunk === '117'`)
			if err := chromedp.Do(step, chromedp.SetValue(`#jp-filter`, "")); err != nil {
				t.Fatal(err)
			}
			if _, err := chromedp.Run(step, chromedp.Evaluate[bool](`document.getElementById('jp-filter').dispatchEvent(new Event('change'))`)); err != nil {
				t.Fatal(err)
			}
			poll("all chunks again", `document.getElementById('jp-range').textContent === 'chunks 1–100 of 120'`)
			// Page 2 of the chunks holds chunk 117.
			if err := click(step, `#jp-next`); err != nil {
				t.Fatal(err)
			}
			poll("page 2 of the chunks", `document.getElementById('jp-range').textContent === 'chunks 101–120 of 120' && !!document.querySelector('#jp-chunks tr[data-chunk="117"]')`)
			if err := click(step, `#jp-prev`); err != nil {
				t.Fatal(err)
			}
			poll("back to page 1", `document.getElementById('jp-range').textContent === 'chunks 1–100 of 120' && document.getElementById('jp-prev').disabled`)
			if err := click(step, `#jp-next`); err != nil {
				t.Fatal(err)
			}
			poll("page 2 again", `document.getElementById('jp-range').textContent === 'chunks 101–120 of 120'`)
			if got, _ := chromedp.Run(step, chromedp.Evaluate[string](`document.querySelector('#jp-chunks tr[data-chunk="117"]').textContent`)); !strings.Contains(got, "dead-lettered") || !strings.Contains(got, walkEnvelope) {
				t.Errorf("chunk 117's row: %q", got)
			}
			if err := click(step, `#jp-chunks tr[data-chunk="117"] td`); err != nil {
				t.Fatal(err)
			}
			// The timeline: the kill, the hold and the compensation, each
			// explained, in time order.
			poll("chunk 117's timeline", `location.hash === '#job/`+walkJob+`/chunk/117' && !!document.querySelector('#jp-calls tr[data-event="compensated"]')`)
			order, err := chromedp.Run(step, chromedp.Evaluate[string](`[...document.querySelectorAll('#jp-calls tr')].map(r => r.dataset.status || r.dataset.event).join(' ')`))
			if want := "delivered SUCCEEDED earlier-run delivered COMPENSATED held delivered FAILED dead-lettered compensated"; err != nil || order != want {
				t.Fatalf("the timeline reads %q (%v), want %q", order, err, want)
			}
			text, _ := chromedp.Run(step, chromedp.Text(`#jp-calls`))
			for _, says := range []string{
				"redelivered 30.6s after delivery 1 (w-1) ended without a result: that worker was killed",
				"earlier run of charge-payment began and never finished",
				"verified: payments said an earlier attempt had taken effect",
				"held at stage 3: the email breaker is open",
				"released 17.6s after the hold, when the email breaker let calls through",
				"422 mailbox unavailable",
				"compensated: refund-payment undid charge-payment ch_117",
			} {
				if !strings.Contains(text, says) {
					t.Errorf("the timeline does not say %q:\n%s", says, text)
				}
			}
			if n, _ := chromedp.Run(step, chromedp.Evaluate[int](`document.querySelectorAll('#jp-calls tr.failed').length`)); n != 3 {
				t.Errorf("%d timeline rows marked failed; want the earlier run, the failed call and the dead-letter", n)
			}
			screenshot(t, step, "#job-page", fmt.Sprintf("job-page-%d.png", width))
			// The chunk's envelope: its reason and recovery's note first.
			if err := click(step, `[data-testid="jp-chunk-envelope"]`); err != nil {
				t.Fatal(err)
			}
			poll("the envelope's page", `location.hash === '#envelope/`+walkEnvelope+`' && document.getElementById('d-id').textContent === '`+walkEnvelope+`'`)
			summary, _ := chromedp.Run(step, chromedp.Text(`#d-summary`))
			if !strings.Contains(summary, "PARTIAL_EXECUTION / COMPENSATE_AND_ABANDON, status abandoned") || !strings.Contains(summary, "failed at stage 3: send-email: 422 mailbox unavailable") ||
				!strings.Contains(summary, "note: compensated charge-payment ch_117 with refund-payment") {
				t.Errorf("the envelope's page leads with %q; want the category, the reason and the compensation", summary)
			}
			if stands, _ := chromedp.Run(step, chromedp.Text(`#d-stands`)); !strings.Contains(stands, "no effect stands") || !strings.Contains(stands, "ch_117") || !strings.Contains(stands, "compensated") {
				t.Errorf("what stands: %q; want nothing, and the charge shown undone", stands)
			}
			screenshot(t, step, "", fmt.Sprintf("envelope-page-%d.png", width))
			// Acknowledged: it asks nothing, changes no status.
			if err := click(step, `[data-testid="ack"]`); err != nil {
				t.Fatal(err)
			}
			poll("the acknowledgement", `document.getElementById('d-result').textContent === 'ack: abandoned'`)
			if rec, _, err := f.stores.Envelopes.Get(context.Background(), walkEnvelope); err != nil || rec.AckedBy != "dashboard" || rec.Status != salvagetype.EnvelopeAbandoned {
				t.Fatalf("envelope after the page's acknowledgement = %+v, %v", rec, err)
			}
			// Replay, asked first.
			if err := click(step, `[data-testid="replay"]`); err != nil {
				t.Fatal(err)
			}
			select {
			case msg := <-asked:
				if !strings.HasPrefix(msg, "replay envelope "+walkEnvelope+"?") {
					t.Fatalf("the replay asked %q", msg)
				}
			case <-time.After(time.Minute):
				t.Fatal("the replay asked nothing")
			}
			poll("the replay's answer", `document.getElementById('d-result').textContent.startsWith('replay: ')`)
			if got, _ := chromedp.Run(step, chromedp.Text(`#d-result`)); got != "replay: recovering" {
				t.Fatalf("the page's replay answered %q", got)
			}
			rec, _, err := f.stores.Envelopes.Get(context.Background(), walkEnvelope)
			if err != nil || rec.Replays != 1 || rec.Status != salvagetype.EnvelopeRecovering {
				t.Fatalf("envelope after the page's replay = %+v, %v", rec, err)
			}
			// "Replay failed…" from the job list finds nothing left: the
			// chunk is requeued once, not twice.
			if err := click(step, `#job-list tr[data-job="`+walkJob+`"] button[data-action="replay-failed"]`); err != nil {
				t.Fatal(err)
			}
			poll("the list's replay-failed answer", `document.getElementById('job-result').textContent.startsWith('nothing to replay')`)
			if rec, _, err := f.stores.Envelopes.Get(context.Background(), walkEnvelope); err != nil || rec.Replays != 1 {
				t.Fatalf("envelope after the list's replay-failed = %+v, %v; want one replay", rec, err)
			}
			// The job page's "Replay failed…" finds nothing left either:
			// asked before it is shown, the server says so, and the
			// button is disabled with its reason.
			if err := click(step, `#job-list tr[data-job="`+walkJob+`"] a`); err != nil {
				t.Fatal(err)
			}
			poll("the page's replay-failed disabled with why", `document.getElementById('jp-replay').disabled && document.getElementById('jp-replay').dataset.allowed === 'false' &&
				document.getElementById('jp-why').textContent.includes('nothing to replay')`)
			chunks, err := f.b.JS.Stream(context.Background(), streams.Chunks)
			if err != nil {
				t.Fatal(err)
			}
			info, err := chunks.Info(context.Background(), jetstream.WithSubjectFilter(streams.ChunkRef{Pipeline: "order-fulfillment", Job: walkJob, Chunk: walkChunk}.Subject()))
			if err != nil || info.State.Subjects[streams.ChunkRef{Pipeline: "order-fulfillment", Job: walkJob, Chunk: walkChunk}.Subject()] != 1 {
				t.Fatalf("chunk 117 on SALVAGE_CHUNKS: %+v, %v; want one message", info.State.Subjects, err)
			}
			// The list's "all" tab, and "Cancel…" on the running job there.
			running := "01JDASHBOARD00000000000000"
			if err := click(step, `#job-tabs button[data-status=""]`); err != nil {
				t.Fatal(err)
			}
			if err := click(step, `#job-list tr[data-job="`+running+`"] button[data-action="cancel"]`); err != nil {
				t.Fatal(err)
			}
			for msg := range asked {
				if strings.HasPrefix(msg, "Cancel job "+running) {
					break
				}
			}
			poll("the list's cancel answer", `document.getElementById('job-result').textContent.startsWith('job `+running+`: ')`)
			if j, err := f.stores.Jobs.Get(context.Background(), running); err != nil || j.CancelledAt == nil {
				t.Fatalf("job after the list's cancel = %+v, %v", j, err)
			}
		})
	}
}
