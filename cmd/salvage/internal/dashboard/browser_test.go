package dashboard_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"

	"github.com/salvagehq/salvage/cmd/salvage/internal/dashboard"
	"github.com/salvagehq/salvage/kv"
	"github.com/salvagehq/salvage/salvagetest"
	"github.com/salvagehq/salvage/salvagetype"
	"github.com/salvagehq/salvage/streams"
)

// TestDashboardInABrowser loads the page in a real headless Chromium at
// 1,280 and 1,920 pixels, sees the DLQ depth and categories match the
// API, opens an envelope and replays it from the page, pauses and
// resumes a pipeline, approves one chunk and rejects another, and acts on
// what a filter matches.
func TestDashboardInABrowser(t *testing.T) {
	t.Parallel()
	for _, width := range []int64{1280, 1920} {
		t.Run(fmt.Sprint(width), func(t *testing.T) {
			t.Parallel()
			dashboardInABrowser(t, width)
		})
	}
}

func dashboardInABrowser(t *testing.T, width int64) {
	f := setup(t, "")
	ctx := browse(t, f.url+"/")
	step, cancelStep := context.WithTimeout(ctx, 3*time.Minute)
	defer cancelStep()
	// The page confirms what changes things (a replay, a bulk action).
	asked := acceptDialogs(ctx)
	if err := chromedp.Do(step, chromedp.EmulateViewport(width, 1000), chromedp.Reload()); err != nil {
		t.Fatal(err)
	}
	settle(t, step)

	var sum dashboard.Summary
	_, body := get(t, f.url+"/api/summary")
	if err := json.Unmarshal([]byte(body), &sum); err != nil {
		t.Fatal(err)
	}
	// Jobs: the list shows the fixture's job; its page at #job/<id>
	// lists its chunks; a chunk's timeline is in time order.
	job := "01JDASHBOARD00000000000000"
	jobLink := `#job-list tr[data-job="` + job + `"] a`
	if err := click(step, jobLink); err != nil {
		t.Fatal(err)
	}
	if err := chromedp.Do(step, chromedp.WaitVisible(`#jp-chunks tr[data-chunk="3"]`)); err != nil {
		t.Fatal(err)
	}
	if _, err := chromedp.Run(step, chromedp.Poll[bool](`location.hash === '#job/`+job+`'`)); err != nil {
		t.Fatal(err)
	}
	if err := click(step, `#jp-chunks tr[data-chunk="3"]`); err != nil {
		t.Fatal(err)
	}
	if err := chromedp.Do(step, chromedp.WaitVisible(`#jp-calls tr`)); err != nil {
		t.Fatal(err)
	}
	// In time order: the delivery, then the calls, the failed one in red.
	if order, err := chromedp.Run(step, chromedp.Evaluate[string](`[...document.querySelectorAll('#jp-calls tr')].map(r => (r.dataset.status || r.dataset.event) + (r.className === 'failed' ? '!' : '')).join(' ')`)); err != nil || order != "delivered SUCCEEDED SUCCEEDED FAILED!" {
		t.Fatalf("the timeline reads %q (%v); want the delivery, then the calls in the order they began, the failed one marked", order, err)
	}
	if n, err := chromedp.Run(step, chromedp.Evaluate[int](`document.querySelectorAll('#jp-calls tr[data-status]').length`)); err != nil || n != 3 {
		t.Fatalf("timeline rows %d (%v); want the chunk's 3 calls", n, err)
	}
	// And what happened to the chunk: its delivery, and who took it.
	if ev, err := chromedp.Run(step, chromedp.Evaluate[string](`document.querySelector('#jp-calls tr[data-event="delivered"]')?.textContent || ''`)); err != nil ||
		!strings.Contains(ev, "delivery 3") || !strings.Contains(ev, "w-fixture") {
		t.Fatalf("the chunk's timeline shows no delivery event: %q (%v)", ev, err)
	}

	row := `tr[data-envelope="` + f.envID + `"]`
	if err := chromedp.Do(step, chromedp.WaitVisible(row)); err != nil {
		t.Fatal(err)
	}
	depth, err := chromedp.Run(step, chromedp.Text(`#dlq-depth`))
	if err != nil {
		t.Fatal(err)
	}
	categories, err := chromedp.Run(step, chromedp.Text(`#categories`))
	if err != nil {
		t.Fatal(err)
	}
	if strings.TrimSpace(depth) != "1" || sum.DLQDepth != 1 {
		t.Fatalf("page DLQ depth %q, API %d", depth, sum.DLQDepth)
	}
	for cat, n := range sum.ByCategory {
		if !strings.Contains(categories, cat) || !strings.Contains(categories, itoa(n)) {
			t.Fatalf("page categories %q lack %s %d from the API", categories, cat, n)
		}
	}
	if err := click(step, row); err != nil {
		t.Fatal(err)
	}
	if err := chromedp.Do(step,
		chromedp.WaitVisible(`[data-testid="detail"]`),
		chromedp.WaitVisible(`#d-failed tr`),
	); err != nil {
		t.Fatal(err)
	}
	// The envelope has its own URL, and leads with what failed and what
	// stands; the journal is folded.
	if _, err := chromedp.Run(step, chromedp.Poll[bool](`location.hash === '#envelope/`+f.envID+`'`)); err != nil {
		t.Fatal(err)
	}
	if stands, err := chromedp.Run(step, chromedp.Text(`#d-stands`)); err != nil || !strings.Contains(stands, "no effect stands") {
		t.Fatalf("what stands: %q, %v", stands, err)
	}
	if open, err := chromedp.Run(step, chromedp.Evaluate[bool](`document.querySelector('#d-journal').closest('details').open`)); err != nil || open {
		t.Fatalf("the journal should be folded (open %v, %v)", open, err)
	}
	// Inside, by stage: stage 1 has a failed call, so its three calls show.
	if n, err := chromedp.Run(step, chromedp.Evaluate[int](`document.querySelectorAll('#d-journal tr[data-stage-head="1"]').length * 10 + [...document.querySelectorAll('#d-journal tr[data-stage="1"]')].filter(r => r.style.display !== 'none').length`)); err != nil || n != 13 {
		t.Fatalf("the journal by stage: %d (%v); want one stage-1 head and its 3 calls shown", n, err)
	}
	detail, err := chromedp.Run(step, chromedp.Text(`#d-summary`))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(detail, "TRANSIENT_NETWORK") {
		t.Errorf("detail %q", detail)
	}
	// From the envelope's page to a bulk replay of its category: a dry
	// run counts it, the page asks, the replay requeues its chunk.
	if err := chromedp.Do(step, chromedp.SetValue(`#f-category`, "TRANSIENT_NETWORK")); err != nil {
		t.Fatal(err)
	}
	if err := click(step, `[data-testid="bulk-replay"]`); err != nil {
		t.Fatal(err)
	}
	if _, err := chromedp.Run(step, chromedp.Poll[bool](`document.getElementById('bulk-result').textContent.startsWith('replay: ')`)); err != nil {
		t.Fatal(err)
	}
	if msg := confirmed(t, asked); !strings.Contains(msg, "replay 1 envelope") {
		t.Fatalf("the bulk replay asked %q", msg)
	}
	if got, _ := chromedp.Run(step, chromedp.Text(`#bulk-result`)); !strings.HasPrefix(got, "replay: 1 done") {
		t.Fatalf("bulk replay from the page answered %q", got)
	}
	rec, _, err := f.stores.Envelopes.Get(context.Background(), f.envID)
	if err != nil || rec.Replays != 1 || rec.Status != salvagetype.EnvelopeRecovering {
		t.Fatalf("envelope after the page's replay = %+v, %v", rec, err)
	}
	// A worker runs the replayed chunk: the envelope resolves, and the
	// page says so.
	worker := startWorker(t, f)
	row = `tr[data-envelope="` + f.envID + `"]`
	if _, err := chromedp.Run(step, chromedp.Poll[bool](`(document.querySelector('`+row+`') || {cells: []}).cells[5]?.textContent === 'resolved'`)); err != nil {
		t.Fatalf("the page never showed the replayed envelope resolved: %v", err)
	}
	// The Workers panel lists the live worker and the pipeline counts it;
	// once it stops, the pipeline has no workers. The worker runs no
	// recovery: the pipeline's row says nobody recovers it.
	if _, err := chromedp.Run(step, chromedp.Poll[bool](`document.querySelector('tr[data-pipeline="order-fulfillment"]')?.dataset.workers === '1' && `+
		`document.querySelector('tr[data-pipeline="order-fulfillment"]')?.cells[3].textContent === 'none' && `+
		`[...document.querySelectorAll('tr[data-worker]')].some(r => r.cells[2].textContent.includes('order-fulfillment') && r.cells[3].textContent === '0')`)); err != nil {
		t.Fatalf("the page never showed the live worker (in partition 0), and nobody recovering its pipeline: %v", err)
	}
	if err := worker.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, err := chromedp.Run(step, chromedp.Poll[bool](`document.querySelector('tr[data-pipeline="order-fulfillment"]')?.cells[2].textContent === 'no workers'`)); err != nil {
		t.Fatalf("the page never showed the pipeline without workers: %v", err)
	}

	// The worker recorded its pipeline: the page pauses it, asking why,
	// and resumes it, asking first.
	pipeRow := `tr[data-pipeline="order-fulfillment"]`
	if err := click(step, pipeRow+`[data-state="running"] button[data-action="pause"]`); err != nil {
		t.Fatal(err)
	}
	if err := chromedp.Do(step, chromedp.WaitVisible(pipeRow+`[data-state="paused"]`)); err != nil {
		t.Fatal(err)
	}
	if msg := confirmed(t, asked); !strings.Contains(msg, "Pause order-fulfillment?") {
		t.Fatalf("the pause asked %q", msg)
	}
	if st, err := f.stores.Pipelines.Get(context.Background(), "order-fulfillment"); err != nil || !st.Paused || st.PausedBy != "dashboard" || st.Reason != "deploy" {
		t.Fatalf("pipeline after the page's pause: %+v, %v", st, err)
	}
	if err := click(step, pipeRow+` button[data-action="resume"]`); err != nil {
		t.Fatal(err)
	}
	if err := chromedp.Do(step, chromedp.WaitVisible(pipeRow+`[data-state="running"]`)); err != nil {
		t.Fatal(err)
	}
	if msg := confirmed(t, asked); !strings.Contains(msg, "Resume order-fulfillment?") {
		t.Fatalf("the resume asked %q", msg)
	}

	// An open breaker shows with its held chunks; a chunk awaiting
	// approval is approved from the page and leaves SALVAGE_HOLD for
	// SALVAGE_CHUNKS.
	bg := context.Background()
	if _, _, err := f.stores.Breakers.Mutate(bg, "crm", "test", func(b *kv.Breaker) error {
		b.Open(salvagetype.BreakerPolicy{}, time.Now(), "503")
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	awaitApproval(t, f, job, 2, `{"order":"o-42","amount":120}`)
	if err := chromedp.Do(step, chromedp.WaitVisible(`tr[data-system="crm"][data-state="open"]`)); err != nil {
		t.Fatal(err)
	}
	// A rate limit on the system, paused by a provider's 429s, shows
	// with its bounds, what is held, its recent 429s and the pause.
	if _, err := f.stores.Limits.Set(bg, salvagetype.Limit{Key: "system.crm", RequestsPerMinute: 600, InFlight: 4}, "test"); err != nil {
		t.Fatal(err)
	}
	if _, err := f.stores.Limits.MutateShares(bg, "system.crm", func(sh *kv.LimitShares) error {
		sh.Shares["w1"] = kv.LimitShare{RequestsPerMinute: 150, InFlight: 1, Wants: true, Expires: time.Now().Add(time.Hour)}
		sh.PausedUntil, sh.PauseReason = time.Now().Add(time.Hour), "429 Too Many Requests"
		sh.AddRefused(time.Now(), 2)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	limitRow := `#limits tr[data-key="system.crm"][data-paused="true"]`
	if err := chromedp.Do(step, chromedp.WaitVisible(limitRow)); err != nil {
		t.Fatal(err)
	}
	if text, err := chromedp.Run(step, chromedp.Evaluate[string](`[...document.querySelectorAll('`+limitRow+` td')].map(td => td.textContent).join('|')`)); err != nil ||
		!strings.HasPrefix(text, "system.crm|600 rpm, 4 in flight|150 rpm, 1 in flight|1|1|2|") {
		t.Fatalf("the limits panel reads %q (%v); want the key, its bounds, what is held, one holder waiting, two 429s, the pause", text, err)
	}
	approveButton := `#approvals tr[data-job="` + job + `"][data-chunk="2"] button[data-action="approve"]`
	if err := chromedp.Do(step, chromedp.WaitVisible(approveButton)); err != nil {
		t.Fatal(err)
	}
	// A person sees what to judge: the whole job id, the stage, the input.
	approval, err := chromedp.Run(step, chromedp.Evaluate[string](`document.querySelector('#approvals tr[data-job="`+job+`"][data-chunk="2"]').textContent`))
	if err != nil || !strings.Contains(approval, job) || !strings.Contains(approval, "2 payment (order-fulfillment)") || !strings.Contains(approval, `"order":"o-42"`) {
		t.Fatalf("the approvals panel shows %q (%v); want the job id, the stage and the input", approval, err)
	}
	if err := press(step, approveButton); err != nil {
		t.Fatal(err)
	}
	if msg := confirmed(t, asked); !strings.HasPrefix(msg, "approve chunk 2 of job "+job+"?") {
		t.Fatalf("the approval asked %q", msg)
	}
	chunks, err := f.b.JS.Stream(bg, streams.Chunks)
	if err != nil {
		t.Fatal(err)
	}
	salvagetest.Eventually(t, time.Minute, func() bool {
		m, err := chunks.GetLastMsgForSubject(bg, streams.ChunkRef{Pipeline: "order-fulfillment", Job: job, Chunk: 2}.Subject())
		return err == nil && m.Header.Get(salvagetype.HeaderApprovedBy) == "dashboard" && m.Header.Get(salvagetype.HeaderApprovedStage) == "2"
	}, "the approved chunk back on SALVAGE_CHUNKS, carrying the dashboard's approval")
	// Another chunk is rejected: it is dead-lettered with the reason, and
	// leaves SALVAGE_HOLD without running.
	awaitApproval(t, f, job, 1, `{"order":"o-41","amount":9000}`)
	rejectButton := `#approvals tr[data-job="` + job + `"][data-chunk="1"] button[data-action="reject"]`
	if err := press(step, rejectButton); err != nil {
		t.Fatal(err)
	}
	if msg := confirmed(t, asked); !strings.HasPrefix(msg, "reject chunk 1 of job "+job+"?") {
		t.Fatalf("the rejection asked %q", msg)
	}
	salvagetest.Eventually(t, time.Minute, func() bool {
		cp, _, err := f.stores.Parts()[0].Checkpoints.Get(bg, job, 1)
		return err == nil && cp.Status == salvagetype.ChunkDeadLettered && strings.Contains(cp.Reason+cp.LastError, "rejected by dashboard")
	}, "the rejected chunk dead-lettered")
	if _, err := chunks.GetLastMsgForSubject(bg, streams.ChunkRef{Pipeline: "order-fulfillment", Job: job, Chunk: 1}.Subject()); err == nil {
		t.Fatal("the rejected chunk went back to SALVAGE_CHUNKS")
	}

	// Bulk: filter by category, acknowledge what matches; the page asks
	// for a confirmation (accepted) after a dry run counted one.
	if err := chromedp.Do(step, chromedp.SetValue(`#f-category`, "TRANSIENT_NETWORK")); err != nil {
		t.Fatal(err)
	}
	// The filter goes into the page's URL, so a link shows the same list.
	if _, err := chromedp.Run(step, chromedp.Evaluate[bool](`document.getElementById('f-category').dispatchEvent(new Event('change'))`)); err != nil {
		t.Fatal(err)
	}
	if _, err := chromedp.Run(step, chromedp.Poll[bool](`location.search === '?category=TRANSIENT_NETWORK'`)); err != nil {
		t.Fatal(err)
	}
	// The chart's series comes from the server, not from what the tab saw.
	if _, err := chromedp.Run(step, chromedp.Poll[bool](`document.querySelectorAll('#tiers polyline').length === 3 && document.getElementById('t3').textContent.includes('in the last hour')`)); err != nil {
		t.Fatal(err)
	}
	// The page has caught up with the approvals (the panel above moved).
	if _, err := chromedp.Run(step, chromedp.Poll[bool](`document.querySelectorAll('#approvals tr').length === 0`)); err != nil {
		t.Fatal(err)
	}
	if err := click(step, `[data-testid="bulk-ack"]`); err != nil {
		t.Fatal(err)
	}
	if _, err := chromedp.Run(step, chromedp.Poll[bool](`document.getElementById('bulk-result').textContent.startsWith('ack: ')`)); err != nil {
		t.Fatal(err)
	}
	if msg := confirmed(t, asked); !strings.Contains(msg, "ack 1 envelope") {
		t.Fatalf("the confirmation asked %q", msg)
	}
	if got, _ := chromedp.Run(step, chromedp.Text(`#bulk-result`)); !strings.HasPrefix(got, "ack: 1 done") {
		t.Fatalf("bulk result %q", got)
	}
	if rec, _, err := f.stores.Envelopes.Get(bg, f.envID); err != nil || rec.AckedBy != "dashboard" {
		t.Fatalf("envelope after the bulk acknowledgement: %+v, %v", rec, err)
	}
}

// browsers bounds the Chromium instances this package runs at once: each
// takes most of a core while it renders, and the suite shares two cores
// with packages whose workers must renew their leases on time.
var browsers = make(chan struct{}, 2)

func itoa(n int) string { b, _ := json.Marshal(n); return string(b) }

// TestSignInInABrowser: with a configured token the page carries none
// and shows a sign-in form and nothing of the jobs; an acknowledgement
// before signing in is refused; the token typed once signs the browser
// in with an HttpOnly, SameSite=Strict cookie the page's script cannot
// read, the views fill and the same click then acts; after signing out
// the views are gone and a mutation is refused again.
func TestSignInInABrowser(t *testing.T) {
	t.Parallel()
	for _, width := range []int64{1280, 1920} {
		t.Run(fmt.Sprint(width), func(t *testing.T) {
			t.Parallel()
			signInInABrowser(t, width)
		})
	}
}

func signInInABrowser(t *testing.T, width int64) {
	token := randomToken(t)
	f := setupWith(t, dashboard.Config{Token: token})
	ctx := browse(t, f.url+"/#envelope/"+f.envID)
	step, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	bg := context.Background()
	if err := chromedp.Do(step, chromedp.EmulateViewport(width, 1000), chromedp.WaitVisible(`#signin-token`)); err != nil {
		t.Fatal(err)
	}
	if html, err := chromedp.Run(step, chromedp.Evaluate[string](`document.documentElement.outerHTML`)); err != nil || strings.Contains(html, token) {
		t.Fatalf("the page carries the configured token (%v)", err)
	}
	// pageAck acknowledges the envelope with the page's own post() and
	// returns what it answered.
	pageAck := func() string {
		t.Helper()
		if _, err := chromedp.Run(step, chromedp.Evaluate[bool](`window.acked = undefined; post('/api/envelopes/`+f.envID+`/ack').then(([ok, b]) => { window.acked = ok ? 'ok' : 'refused: ' + b.error; }); true`)); err != nil {
			t.Fatal(err)
		}
		if _, err := chromedp.Run(step, chromedp.Poll[bool](`window.acked !== undefined`)); err != nil {
			t.Fatal(err)
		}
		got, _ := chromedp.Run(step, chromedp.Evaluate[string](`window.acked`))
		return got
	}
	// Nothing of the jobs before signing in: the views answer 401.
	noViews := func(when string) {
		t.Helper()
		if _, err := chromedp.Run(step, chromedp.Poll[bool](`document.getElementById('updated').textContent.includes('sign in')`)); err != nil {
			got, _ := chromedp.Run(step, chromedp.Text(`#updated`))
			t.Fatalf("%s: the page says %q, want it to ask for a sign-in", when, got)
		}
		// Said once: it read "error: Error: sign in to see this".
		if got, _ := chromedp.Run(step, chromedp.Text(`#updated`)); strings.Contains(strings.ToLower(got), "error: error") {
			t.Fatalf("%s: the page says %q", when, got)
		}
		if html, err := chromedp.Run(step, chromedp.Evaluate[string](`document.body.innerText`)); err != nil || strings.Contains(html, f.envID) || strings.Contains(html, "01JDASHBOARD") {
			t.Fatalf("%s: the page shows the jobs or the envelope (%v)", when, err)
		}
	}
	noViews("before signing in")
	if got := pageAck(); !strings.Contains(got, "sign in") {
		t.Fatalf("ack before signing in: %q", got)
	}
	// A refusal is said once, whether or not the server's reason begins
	// with the same words (it read "replay refused: replay refused: ...").
	for in, want := range map[string]string{
		"replay refused: envelope E was superseded": "replay refused: envelope E was superseded",
		"job J was cancelled":                       "replay refused: job J was cancelled",
	} {
		got, err := chromedp.Run(step, chromedp.Evaluate[string](`refusedText('replay', `+strconv.Quote(in)+`)`))
		if err != nil || got != want {
			t.Fatalf("refusedText(replay, %q) = %q, %v; want %q", in, got, err, want)
		}
	}
	if rec, _, err := f.stores.Envelopes.Get(bg, f.envID); err != nil || rec.AckedBy != "" {
		t.Fatalf("a refused ack acknowledged: %+v %v", rec, err)
	}
	ackResult := func(prefix string) string {
		t.Helper()
		if _, err := chromedp.Run(step, chromedp.Evaluate[bool](`document.getElementById('d-result').textContent = ''; true`)); err != nil {
			t.Fatal(err)
		}
		if err := chromedp.Do(step, chromedp.Click(`[data-testid="ack"]`)); err != nil {
			t.Fatal(err)
		}
		if _, err := chromedp.Run(step, chromedp.Poll[bool](`document.getElementById('d-result').textContent.startsWith('`+prefix+`')`)); err != nil {
			got, _ := chromedp.Run(step, chromedp.Text(`#d-result`))
			t.Fatalf("ack answered %q, want %q…", got, prefix)
		}
		got, _ := chromedp.Run(step, chromedp.Text(`#d-result`))
		return got
	}
	// A wrong token is refused; the right one signs in.
	if err := chromedp.Do(step, chromedp.SendKeys(`#signin-token`, "guess"), chromedp.Click(`#signin-button`)); err != nil {
		t.Fatal(err)
	}
	if _, err := chromedp.Run(step, chromedp.Poll[bool](`document.getElementById('auth-result').textContent.startsWith('sign-in refused')`)); err != nil {
		t.Fatal(err)
	}
	if err := chromedp.Do(step, chromedp.SendKeys(`#signin-token`, token), chromedp.Click(`#signin-button`), chromedp.WaitVisible(`#signout`),
		chromedp.WaitVisible(`tr[data-envelope="`+f.envID+`"]`), chromedp.WaitVisible(`[data-testid="ack"]`)); err != nil {
		t.Fatal(err)
	}
	cookies, err := chromedp.Call(step, network.GetCookies, network.GetCookiesParams{})
	if err != nil {
		t.Fatal(err)
	}
	var session *network.Cookie
	for _, c := range cookies.Cookies {
		if c.Name == dashboard.SessionCookie {
			session = c
		}
	}
	if session == nil || !session.HTTPOnly || session.SameSite != network.CookieSameSiteStrict || strings.Contains(session.Value, token) {
		t.Fatalf("the browser's session cookie: %+v", session)
	}
	if seen, err := chromedp.Run(step, chromedp.Evaluate[string](`document.cookie`)); err != nil || strings.Contains(seen, dashboard.SessionCookie) {
		t.Fatalf("the page's script reads the session cookie: %q %v", seen, err)
	}
	if got := ackResult("ack: "); got == "" {
		t.Fatal("no answer")
	}
	if rec, _, err := f.stores.Envelopes.Get(bg, f.envID); err != nil || rec.AckedBy != "token" {
		t.Fatalf("the signed-in ack did not land: %+v %v", rec, err)
	}
	// Signed out, the page asks for the token again and a mutation is
	// refused.
	if err := chromedp.Do(step, chromedp.Click(`#signout`), chromedp.WaitVisible(`#signin-token`)); err != nil {
		t.Fatal(err)
	}
	noViews("after signing out")
	if got := pageAck(); !strings.Contains(got, "sign in") {
		t.Fatalf("ack after signing out: %q", got)
	}
}
