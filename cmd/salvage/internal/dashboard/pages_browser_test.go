package dashboard_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/salvagehq/salvage/cmd/salvage/internal/dashboard"
)

// overflow lists what sticks out of the viewport sideways, or scrolls
// sideways inside its panel, on the page shown now.
const overflow = `(() => {
  const W = document.documentElement.clientWidth, bad = [];
  if (document.documentElement.scrollWidth > W) bad.push('the page is ' + document.documentElement.scrollWidth + ' px wide');
  for (const e of document.querySelectorAll('body *')) {
    const r = e.getBoundingClientRect();
    if (r.width > 0 && r.right > W + 1) bad.push(e.tagName.toLowerCase() + (e.id ? '#' + e.id : '') + ' ends at ' + Math.round(r.right));
  }
  for (const s of document.querySelectorAll('section')) {
    if (s.offsetParent !== null && s.scrollWidth > s.clientWidth + 1) bad.push('a panel (' + (s.dataset.testid || s.id || s.querySelector('h2').textContent) + ') scrolls sideways: ' + s.scrollWidth + ' > ' + s.clientWidth);
  }
  return bad.slice(0, 15);
})()`

// TestPagesHaveAddressesAndFit, at 1,280 and 1,920 px: the overview, a
// job's page, a chunk's and an envelope's each open directly by their
// address, show that page alone (linking back), and nothing on any of
// them sticks out or scrolls sideways.
func TestPagesHaveAddressesAndFit(t *testing.T) {
	t.Parallel()
	for _, width := range []int64{1280, 1920} {
		t.Run(fmt.Sprint(width), func(t *testing.T) {
			t.Parallel()
			pagesFit(t, width)
		})
	}
}

func pagesFit(t *testing.T, width int64) {
	f := setupWith(t, dashboard.Config{})
	escalated := escalatedEnvelope(t, f)
	ctx := browse(t, "about:blank")
	step, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	if err := chromedp.Do(step, chromedp.EmulateViewport(width, 900)); err != nil {
		t.Fatal(err)
	}
	job := "01JDASHBOARD00000000000000"
	for _, pg := range []struct{ path, ready string }{
		{"/", `document.querySelectorAll('#job-list tr').length >= 2 && document.getElementById('updated').textContent.startsWith('updated ')`},
		{"/jobs/" + job, `document.body.dataset.page === 'job' && document.getElementById('jp-id').textContent === '` + job + `' &&
			document.querySelectorAll('#jp-chunks tr').length === 3 && document.querySelector('[data-testid="jobs"]').offsetParent === null &&
			document.getElementById('home-link').offsetParent !== null`},
		{"/jobs/" + job + "/chunks/3", `document.getElementById('jp-chunk').textContent.startsWith('chunk 3') && location.pathname === '/jobs/` + job + `/chunks/3' &&
			document.getElementById('jp-timeline').getBoundingClientRect().top < document.getElementById('jp-chunks').getBoundingClientRect().top`},
		{"/envelopes/" + f.envID, `document.body.dataset.page === 'envelope' && document.getElementById('d-id').textContent === '` + f.envID + `' &&
			document.querySelector('#d-audit tr') !== null && document.getElementById('job-page').offsetParent === null`},
		{"/envelopes/" + escalated, `document.getElementById('d-id').textContent === '` + escalated + `' && document.querySelector('[data-testid="replay"]').disabled`},
	} {
		if err := chromedp.Do(step, chromedp.Navigate(f.url+pg.path)); err != nil {
			t.Fatal(err)
		}
		if _, err := chromedp.Run(step, chromedp.Poll[bool](pg.ready, chromedp.WithPollingTimeout(0))); err != nil {
			text, _ := chromedp.Run(step, chromedp.Evaluate[string](`document.body.innerText.slice(0, 600)`))
			t.Fatalf("%s at %d px did not show: %v\n%s", pg.path, width, err, text)
		}
		bad, err := chromedp.Run(step, chromedp.Evaluate[[]string](overflow))
		if err != nil || len(bad) > 0 {
			t.Errorf("%s at %d px: %v\n%s", pg.path, width, err, strings.Join(bad, "\n"))
		}
		screenshot(t, step, "", fmt.Sprintf("page-%d-%s.png", width, strings.ReplaceAll(strings.Trim(pg.path, "/"), "/", "-")))
	}
}
