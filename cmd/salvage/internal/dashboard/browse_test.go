package dashboard_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"

	"github.com/salvagehq/salvage"
	"github.com/salvagehq/salvage/kv"
	"github.com/salvagehq/salvage/salvagetype"
	"github.com/salvagehq/salvage/streams"
)

// chromium finds Debian's chromium (installed by .ci/run). Outside CI a
// machine without it skips the browser test; in CI its absence fails.
func chromium(t *testing.T) string {
	t.Helper()
	for _, p := range []string{"/usr/bin/chromium", "/usr/bin/chromium-browser"} {
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	if p, err := exec.LookPath("chromium"); err == nil {
		return p
	}
	if os.Getenv("CI") != "" {
		t.Fatal("chromium is not installed: .ci/run installs Debian's chromium")
	}
	t.Skip("chromium not installed (apt-get install chromium); CI installs it")
	return ""
}

// browse starts a headless Chromium on url, once one of the package's
// browser slots is free (held until the test ends). The first action starts the
// browser; it must not carry a timeout. A browser that dies while
// starting (seen once on a loaded machine, its output empty) gets two
// more tries, each with a fresh profile.
func browse(t *testing.T, url string) context.Context {
	t.Helper()
	exe := chromium(t)
	browsers <- struct{}{}
	t.Cleanup(func() { <-browsers })
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(exe), chromedp.NoSandbox, chromedp.DisableGPU,
		chromedp.Flag("disable-background-networking", true), chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true), chromedp.Flag("no-first-run", true), chromedp.Flag("disable-quic", true))
	for try := 1; ; try++ {
		actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), append(opts, chromedp.UserDataDir(t.TempDir()))...)
		c, cancel := chromedp.NewContext(actx)
		err := chromedp.Do(c, chromedp.Navigate(url))
		if err == nil {
			t.Cleanup(func() { cancel(); cancelAlloc() })
			return c
		}
		cancel()
		cancelAlloc()
		if try == 3 {
			t.Fatalf("chromium did not start in %d tries: %v", try, err)
		}
		t.Logf("chromium did not start (try %d): %v", try, err)
	}
}

// acceptDialogs accepts every dialog the page in ctx opens — a prompt
// (the reason for a pause) is answered "deploy" — and passes each
// question on.
func acceptDialogs(ctx context.Context) <-chan string {
	dialogs := chromedp.Events(ctx, page.JavascriptDialogOpening)
	asked := make(chan string, 16)
	go func() {
		for ev, err := range dialogs {
			if err != nil {
				return
			}
			asked <- ev.Message
			_, _ = chromedp.Call(ctx, page.HandleJavaScriptDialog, page.HandleJavaScriptDialogParams{Accept: true, PromptText: "deploy"})
		}
	}()
	return asked
}

// confirmed returns the message of the next confirm dialog the page
// opened, or fails the test after a minute without one (a bound for a
// click that was lost, not a speed: the test waited 19 minutes once).
func confirmed(t *testing.T, asked <-chan string) string {
	t.Helper()
	select {
	case msg := <-asked:
		return msg
	case <-time.After(time.Minute):
		t.Fatal("no confirm dialog opened within a minute of the click")
		return ""
	}
}

// press clicks what sel finds when the click happens, from the page
// itself: a panel that re-renders on every poll replaces its rows, and a
// mouse click aimed at the row found a moment before landed on nothing
// (CI: an approval whose confirm never opened). The click runs in a task
// of its own, so the confirm it opens does not hold up the call.
func press(ctx context.Context, sel string) error {
	if err := chromedp.Do(ctx, chromedp.WaitVisible(sel)); err != nil {
		return err
	}
	q, _ := json.Marshal(sel)
	found, err := chromedp.Run(ctx, chromedp.Evaluate[bool](fmt.Sprintf(
		`document.querySelector(%s) !== null && (setTimeout(() => document.querySelector(%s)?.click(), 0), true)`, q, q)))
	if err == nil && !found {
		err = fmt.Errorf("press %s: no such element", sel)
	}
	return err
}

// screenshot saves what the browser shows of sel (""; the viewport) as name in the
// directory $SALVAGE_SCREENSHOTS, when it is set: how the README's
// screenshots are made (SALVAGE_SCREENSHOTS=$PWD/.screenshots go test
// -run TestDashboardInABrowser ./cmd/salvage/internal/dashboard/).
func screenshot(t *testing.T, ctx context.Context, sel, name string) {
	t.Helper()
	dir := os.Getenv("SALVAGE_SCREENSHOTS")
	if dir == "" {
		return
	}
	var png []byte
	var err error
	if sel == "" {
		png, err = chromedp.Run(ctx, chromedp.CaptureScreenshot())
	} else {
		png, err = chromedp.Run(ctx, chromedp.Screenshot(sel))
	}
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, name), png, 0o644); err != nil {
		t.Fatal(err)
	}
}

// awaitApproval parks chunk of job before its stage 2, "payment", as a
// worker does, with input.
func awaitApproval(t *testing.T, f *fixture, job string, chunk int, input string) {
	t.Helper()
	bg := context.Background()
	if _, err := f.stores.Parts()[0].Checkpoints.Mutate(bg, job, chunk, func(cp *kv.Checkpoint) error {
		cp.Status, cp.Stage = salvagetype.ChunkAwaitingApproval, 2
		cp.Record(salvagetype.ChunkEvent{Kind: salvagetype.EventAwaitingApproval, Stage: 2, Detail: "payment"})
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	parked := fmt.Sprintf(`{"job_id":%q,"chunk":%d,"pipeline":"order-fulfillment","epoch":0,"input":%s}`, job, chunk, input)
	if _, err := f.b.JS.Publish(bg, streams.ChunkRef{Job: job, Chunk: chunk}.Hold(streams.SystemApproval), []byte(parked)); err != nil {
		t.Fatal(err)
	}
}

// startWorker runs a worker for the fixture's pipeline, whose one stage
// does nothing: enough to finish a replayed chunk.
func startWorker(t *testing.T, f *fixture) *salvage.Client {
	t.Helper()
	p := &salvage.Pipeline{Name: "order-fulfillment", Split: salvage.SplitItems,
		Stages: []salvage.Stage{{Name: "noop", Agents: []salvage.Agent{{Name: "noop", Run: func(context.Context, *salvage.Turn) (any, error) {
			return "ok", nil
		}}}}}}
	c, err := salvage.NewClient(f.b.JS, &salvage.Config{Pipelines: []*salvage.Pipeline{p}, Roles: []salvage.Role{salvage.RoleWorker}})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Stop(context.Background()) })
	return c
}
