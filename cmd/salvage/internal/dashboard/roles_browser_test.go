package dashboard_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/salvagehq/salvage/cmd/salvage/internal/dashboard"
	"github.com/salvagehq/salvage/kv"
	"github.com/salvagehq/salvage/salvagetype"
	"github.com/salvagehq/salvage/streams"
)

// TestViewerAndOperatorInABrowser, at 1,280 and 1,920 px: a viewer signs
// in with their own password and sees the envelope and the job, every
// change on them disabled with why; an operator signs in, replays the
// envelope with a reason, and its page's audit names her, verified, with
// that reason.
func TestViewerAndOperatorInABrowser(t *testing.T) {
	t.Parallel()
	for _, width := range []int64{1280, 1920} {
		t.Run(fmt.Sprint(width), func(t *testing.T) {
			t.Parallel()
			viewerAndOperator(t, width)
		})
	}
}

func viewerAndOperator(t *testing.T, width int64) {
	users := usersFile(t, "alice operator "+hash(t, "alice-pw"), "vic viewer "+hash(t, "vic-pw"))
	f := setupWith(t, dashboard.Config{Users: users})
	escalated := escalatedEnvelope(t, f)
	ctx := browse(t, f.url+"/#envelope/"+f.envID)
	asked := acceptDialogs(ctx)
	step, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	poll := func(what, cond string) {
		t.Helper()
		if _, err := chromedp.Run(step, chromedp.Poll[bool](cond, chromedp.WithPollingTimeout(0))); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	signIn := func(user, password string) {
		t.Helper()
		if err := chromedp.Do(step, chromedp.EmulateViewport(width, 1000), chromedp.WaitVisible(`#signin-user`),
			chromedp.SendKeys(`#signin-user`, user), chromedp.SendKeys(`#signin-token`, password), chromedp.Click(`#signin-button`)); err != nil {
			t.Fatal(err)
		}
		poll(user+" signed in", fmt.Sprintf(`document.getElementById('who').textContent.includes(%q)`, user))
	}

	signIn("vic", "vic-pw")
	if err := chromedp.Do(step, chromedp.Navigate(f.url+"/#envelope/"+f.envID)); err != nil {
		t.Fatal(err)
	}
	poll("the envelope shown to the viewer", `document.getElementById('d-id').textContent === '`+f.envID+`'`)
	if err := chromedp.Do(step, chromedp.Navigate(f.url+"/#job/01JDASHBOARD00000000000000")); err != nil {
		t.Fatal(err)
	}
	poll("the job shown to the viewer", `document.getElementById('jp-id').textContent === '01JDASHBOARD00000000000000'`)
	poll("the envelope's page again", `(location.hash = '#envelope/`+f.envID+`', document.getElementById('d-id').textContent === '`+f.envID+`')`)
	// Every change the page offers is disabled and says why.
	poll("the page's buttons rendered", `document.querySelectorAll('button[data-mutation], button[data-action]').length >= 7`)
	enabled, err := chromedp.Run(step, chromedp.Evaluate[[]string](
		`[...document.querySelectorAll('button[data-mutation], button[data-action]')].filter(b => !b.disabled || !b.title.includes('viewer')).map(b => b.outerHTML)`))
	if err != nil || len(enabled) > 0 {
		t.Fatalf("the viewer's page has %d changes enabled (%v): %s", len(enabled), err, strings.Join(enabled, "\n"))
	}
	if err := press(step, `#signout`); err != nil {
		t.Fatal(err)
	}
	if err := chromedp.Do(step, chromedp.WaitVisible(`#signin-user`)); err != nil {
		t.Fatal(err)
	}

	signIn("alice", "alice-pw")
	if err := chromedp.Do(step, chromedp.Navigate(f.url+"/#envelope/"+f.envID)); err != nil {
		t.Fatal(err)
	}
	// An envelope the server would not replay: its button is disabled,
	// and the page says the server's reason.
	if err := chromedp.Do(step, chromedp.Navigate(f.url+"/#envelope/"+escalated)); err != nil {
		t.Fatal(err)
	}
	poll("the escalated envelope's replay disabled with why", `document.getElementById('d-id').textContent === '`+escalated+`' &&
		document.querySelector('[data-testid="replay"]').disabled && document.querySelector('[data-testid="replay"]').dataset.allowed === 'false' &&
		document.getElementById('d-why').textContent.includes('was cancelled') && !document.querySelector('[data-testid="resolve"]').disabled`)
	if err := chromedp.Do(step, chromedp.Navigate(f.url+"/#envelope/"+f.envID)); err != nil {
		t.Fatal(err)
	}
	poll("the envelope shown to the operator", `document.getElementById('d-id').textContent === '`+f.envID+`' && !document.querySelector('[data-testid="replay"]').disabled`)
	if err := press(step, `[data-testid="replay"]`); err != nil {
		t.Fatal(err)
	}
	select {
	case msg := <-asked:
		if !strings.HasPrefix(msg, "replay envelope "+f.envID+"?") || !strings.Contains(msg, "Reason") {
			t.Fatalf("the replay asked %q", msg)
		}
	case <-time.After(time.Minute):
		t.Fatal("the replay asked nothing")
	}
	poll("the replay's answer", `document.getElementById('d-result').textContent.startsWith('replay: ')`)
	// She pauses the pipeline and approves a chunk from the overview,
	// giving the same reason each time.
	if err := f.stores.Pipelines.Register(context.Background(), "order-fulfillment"); err != nil {
		t.Fatal(err)
	}
	job := "01JDASHBOARD00000000000000"
	awaitApproval(t, f, job, 2, `{"order":"o-42"}`)
	if err := chromedp.Do(step, chromedp.Navigate(f.url+"/")); err != nil {
		t.Fatal(err)
	}
	// The held panel lists it across jobs, saying why it waits.
	poll("the chunk awaiting approval in the held panel", `[...document.querySelectorAll('#held tr[data-job="`+job+`"]')].some(r => r.dataset.chunk === '2' && r.textContent.includes('awaiting approval'))`)
	for _, sel := range []string{`tr[data-pipeline="order-fulfillment"] button[data-action="pause"]`,
		`#approvals tr[data-job="` + job + `"][data-chunk="2"] button[data-action="approve"]`} {
		poll("the button "+sel, `(b => b !== null && !b.disabled)(document.querySelector('`+sel+`'))`)
		if err := press(step, sel); err != nil {
			t.Fatal(err)
		}
		select {
		case <-asked:
		case <-time.After(time.Minute):
			t.Fatalf("%s asked nothing", sel)
		}
	}
	// The overview's audit names her for each, with her reason.
	poll("alice's pause, approval and replay in the audit", `['pause', 'approve', 'replay'].every(a => [...document.querySelectorAll('#audit tr[data-actor="alice"]')].some(r =>
		r.dataset.auditAction === a && r.dataset.outcome === 'ok' && r.textContent.includes('deploy') && !r.textContent.includes('unverified')))`)
	// The envelope's page lists the action: alice's, with her reason.
	poll("the audit row", `(show('`+f.envID+`'), [...document.querySelectorAll('#d-audit tr[data-actor="alice"]')].some(r => r.dataset.auditAction === 'replay' && r.textContent.includes('deploy') && !r.textContent.includes('unverified')))`)
}

// escalatedEnvelope adds an escalated envelope of a cancelled job to f:
// one whose replay the server refuses.
func escalatedEnvelope(t *testing.T, f *fixture) string {
	t.Helper()
	ctx := context.Background()
	job, id := "01JCANCELLED00000000000000", "01JESCALATED00000000000000"
	at := time.Now()
	if err := f.stores.Jobs.Create(ctx, kv.Job{Job: salvagetype.Job{ID: job, Pipeline: "order-fulfillment", Chunks: 1, CancelledAt: &at}}); err != nil {
		t.Fatal(err)
	}
	env := salvagetype.Envelope{ID: id, Job: job, Chunk: 1, Pipeline: "order-fulfillment", Category: salvagetype.CategoryCompensationNeeded,
		Strategy: salvagetype.StrategyEscalate, Error: "card declined", CreatedAt: at,
		Original: salvagetype.OriginalMessage{Stream: streams.Chunks, Seq: 1, Subject: streams.ChunkRef{Pipeline: "order-fulfillment", Job: job, Chunk: 1}.Subject(),
			Data: json.RawMessage(`{"job_id":"` + job + `","chunk":1,"pipeline":"order-fulfillment","epoch":0,"input":{}}`)}}
	data, _ := json.Marshal(env)
	ack, err := f.b.JS.Publish(ctx, streams.ChunkRef{Pipeline: env.Pipeline, Job: job, Chunk: 1}.DLQ(env.Category), data)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.stores.Envelopes.Put(ctx, kv.EnvelopeRecord{EnvelopeRecord: salvagetype.EnvelopeRecord{ID: id, Job: job, Chunk: 1, Category: env.Category,
		Strategy: env.Strategy, Status: salvagetype.EnvelopeEscalated, Human: true, DLQSeq: ack.Sequence, CreatedAt: at}}); err != nil {
		t.Fatal(err)
	}
	return id
}
