package dashboard_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/salvagehq/salvage/salvagetype"
)

// TestJobPageInABrowser drives the job page at 1,280 and 1,920 pixels: a
// job opened by its URL shows its pipeline's pause; the chunk filter
// shows the failed chunk alone, paging walks the chunks; the envelope
// links to its job and the job to its envelopes; the cancel button
// cancels the job, asking first; the pipelines panel's resume and pause
// take a real mouse click at both widths.
func TestJobPageInABrowser(t *testing.T) {
	t.Parallel()
	for _, width := range []int64{1280, 1920} {
		t.Run(fmt.Sprint(width), func(t *testing.T) {
			t.Parallel()
			f := setup(t, "")
			worker := startWorker(t, f) // records the pipeline, so it can be paused
			if _, err := worker.PipelinePause(context.Background(), "order-fulfillment", "alice", "deploy"); err != nil {
				t.Fatal(err)
			}
			job := "01JDASHBOARD00000000000000"
			ctx := browse(t, f.url+"/")
			step, cancel := context.WithTimeout(ctx, 3*time.Minute)
			defer cancel()
			asked := acceptDialogs(ctx)
			if err := chromedp.Do(step, chromedp.EmulateViewport(width, 900), chromedp.Navigate(f.url+"/#job/"+job),
				chromedp.WaitVisible(`#jp-chunks tr[data-chunk="3"]`)); err != nil {
				t.Fatal(err)
			}
			settle(t, step)
			// Opened by URL, before the page has read anything else.
			if _, err := chromedp.Run(step, chromedp.Poll[bool](`document.getElementById('jp-status').dataset.paused === 'yes'`)); err != nil {
				status, _ := chromedp.Run(step, chromedp.Text(`#jp-status`))
				t.Fatalf("a job opened by URL does not show its pipeline's pause: %q", status)
			}
			// The filter: only the dead-lettered chunk.
			if err := chromedp.Do(step, chromedp.SetValue(`#jp-filter`, "failed")); err != nil {
				t.Fatal(err)
			}
			if _, err := chromedp.Run(step, chromedp.Evaluate[bool](`document.getElementById('jp-filter').dispatchEvent(new Event('change'))`)); err != nil {
				t.Fatal(err)
			}
			if _, err := chromedp.Run(step, chromedp.Poll[bool](`document.querySelectorAll('#jp-chunks tr').length === 1 && document.querySelector('#jp-chunks tr').dataset.chunk === '3'`)); err != nil {
				t.Fatalf("the failed filter: %v", err)
			}
			if got, _ := chromedp.Run(step, chromedp.Text(`#jp-range`)); !strings.Contains(got, "chunks 1–1 of 1 failed or waiting") {
				t.Errorf("range under the filter: %q", got)
			}
			// Paging, two chunks a page: 1 and 2, then 3.
			if _, err := chromedp.Run(step, chromedp.Evaluate[bool](`chunkLimit = 2; document.getElementById('jp-filter').value = ''; chunkOffset = 0; showJob(currentJob); true`)); err != nil {
				t.Fatal(err)
			}
			if _, err := chromedp.Run(step, chromedp.Poll[bool](`document.querySelectorAll('#jp-chunks tr').length === 2 && !document.getElementById('jp-next').disabled`)); err != nil {
				t.Fatalf("the first page of two chunks: %v", err)
			}
			if err := click(step, `#jp-next`); err != nil {
				t.Fatal(err)
			}
			if _, err := chromedp.Run(step, chromedp.Poll[bool](`document.querySelectorAll('#jp-chunks tr').length === 1 && document.querySelector('#jp-chunks tr').dataset.chunk === '3' && document.getElementById('jp-next').disabled`)); err != nil {
				t.Fatalf("the second page: %v", err)
			}
			// Job -> its envelopes -> the envelope -> back to the job.
			if err := click(step, `#jp-envelopes`); err != nil {
				t.Fatal(err)
			}
			row := `tr[data-envelope="` + f.envID + `"]`
			if _, err := chromedp.Run(step, chromedp.Poll[bool](`document.getElementById('f-job').textContent === '`+job+`' && !!document.querySelector('`+row+`')`)); err != nil {
				t.Fatalf("the job's envelopes: %v", err)
			}
			// "all jobs" lifts the job filter; the envelope stays listed.
			if err := click(step, `#f-job-box button`); err != nil {
				t.Fatal(err)
			}
			if _, err := chromedp.Run(step, chromedp.Poll[bool](`document.getElementById('f-job').textContent === '' && !!document.querySelector('`+row+`')`)); err != nil {
				t.Fatalf("all jobs: %v", err)
			}
			if err := click(step, row); err != nil {
				t.Fatal(err)
			}
			if err := chromedp.Do(step, chromedp.WaitVisible(`[data-testid="d-job"]`)); err != nil {
				t.Fatal(err)
			}
			// A person resolves the envelope by hand, asked first.
			if err := click(step, `[data-testid="resolve"]`); err != nil {
				t.Fatal(err)
			}
			if msg := <-asked; !strings.HasPrefix(msg, "resolve envelope "+f.envID+"?") {
				t.Fatalf("the resolve asked %q", msg)
			}
			if _, err := chromedp.Run(step, chromedp.Poll[bool](`document.getElementById('d-result').textContent === 'resolve: resolved'`)); err != nil {
				got, _ := chromedp.Run(step, chromedp.Text(`#d-result`))
				t.Fatalf("the page's resolve answered %q", got)
			}
			if rec, _, err := f.stores.Envelopes.Get(context.Background(), f.envID); err != nil || rec.Status != salvagetype.EnvelopeResolved || rec.ResolvedBy == "" {
				t.Fatalf("envelope after the page's resolve = %+v, %v", rec, err)
			}
			if err := click(step, `[data-testid="d-job"]`); err != nil {
				t.Fatal(err)
			}
			// ... at its chunk's timeline.
			if _, err := chromedp.Run(step, chromedp.Poll[bool](`location.hash === '#job/`+job+`/chunk/3' && document.querySelectorAll('#jp-calls tr[data-status]').length === 3`)); err != nil {
				t.Fatal(err)
			}
			// Cancel, from the page, asking first.
			if err := chromedp.Do(step, chromedp.WaitVisible(`#jp-cancel`)); err != nil {
				t.Fatal(err)
			}
			if err := click(step, `#jp-cancel`); err != nil {
				t.Fatal(err)
			}
			select {
			case msg := <-asked:
				if !strings.Contains(msg, "Cancel job "+job) {
					t.Fatalf("the cancel asked %q", msg)
				}
			case <-time.After(time.Minute):
				t.Fatal("the cancel asked nothing")
			}
			if _, err := chromedp.Run(step, chromedp.Poll[bool](`document.getElementById('jp-result').textContent.startsWith('job `+job+`: ')`)); err != nil {
				got, _ := chromedp.Run(step, chromedp.Text(`#jp-result`))
				t.Fatalf("the page's cancel answered %q", got)
			}
			if j, err := f.stores.Jobs.Get(context.Background(), job); err != nil || j.CancelledAt == nil {
				t.Fatalf("job after the page's cancel = %+v, %v", j, err)
			}
			// The pipelines panel's buttons take a real click at this
			// width (at 1,400 px another panel once covered them).
			pipeRow := `tr[data-pipeline="order-fulfillment"]`
			if err := click(step, pipeRow+`[data-state="paused"] button[data-action="resume"]`); err != nil {
				t.Fatal(err)
			}
			if err := chromedp.Do(step, chromedp.WaitVisible(pipeRow+`[data-state="running"]`)); err != nil {
				t.Fatalf("resume from the page at %d px: %v", width, err)
			}
			if err := click(step, pipeRow+` button[data-action="pause"]`); err != nil {
				t.Fatal(err)
			}
			if err := chromedp.Do(step, chromedp.WaitVisible(pipeRow+`[data-state="paused"]`)); err != nil {
				t.Fatalf("pause from the page at %d px: %v", width, err)
			}
		})
	}
}

// settle waits until the page has read everything once (its panels and
// the job list filled), so what a test clicks next no longer moves. A
// poll that fails before its deadline is asked again: right after a
// reload the browser may still answer for the old document's context
// ("Cannot find context with specified id", seen in CI).
func settle(t *testing.T, ctx context.Context) {
	t.Helper()
	var err error
	for range 5 {
		if _, err = chromedp.Run(ctx, chromedp.Poll[bool](`document.getElementById('updated').textContent.startsWith('updated ') && document.querySelectorAll('#job-list tr').length > 0`)); err == nil || ctx.Err() != nil {
			break
		}
		again(ctx, 200*time.Millisecond)
	}
	if err != nil {
		t.Fatalf("the page never finished loading: %v", err)
	}
}

// click clicks sel with the mouse, as a person would (a button another
// panel covers is not clicked): once sel is visible and has stayed where
// it is for 200 ms (a panel that just changed above it moves it), trying
// again when the page re-rendered the node between finding and clicking
// it.
func click(ctx context.Context, sel string) error {
	q, _ := json.Marshal(sel)
	still := fmt.Sprintf(`new Promise(ok => { const box = () => JSON.stringify(document.querySelector(%s)?.getBoundingClientRect());
		const a = box(); setTimeout(() => ok(a !== undefined && a === box()), 200); })`, q)
	var err error
	for range 5 {
		if err = chromedp.Do(ctx, chromedp.WaitVisible(sel)); err != nil {
			continue
		}
		for range 50 {
			if ok, e := chromedp.Run(ctx, chromedp.Evaluate[bool](still, chromedp.EvalAwaitPromise)); e != nil || ok {
				break
			}
		}
		if err = chromedp.Do(ctx, chromedp.Click(sel)); err == nil {
			return nil
		}
		again(ctx, 100*time.Millisecond)
	}
	return err
}

// again waits d, or until ctx ends, before a browser action that failed
// for a moment (a node re-rendered, a document replaced) is tried again.
func again(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}
