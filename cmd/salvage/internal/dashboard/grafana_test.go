package dashboard

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// exported returns every metric /metrics can export, by name, with its
// labels, from the descriptors the server registers.
func exported(t *testing.T) map[string][]string {
	t.Helper()
	ch := make(chan *prometheus.Desc, 64)
	go func() {
		collector{}.Describe(ch)
		calls := newCallStats()
		calls.latency.Describe(ch)
		calls.limitWait.Describe(ch)
		newJobIndex().duration.Describe(ch)
		close(ch)
	}()
	name := regexp.MustCompile(`fqName: "([^"]+)"`)
	labels := regexp.MustCompile(`variableLabels: \{([^}]*)\}`)
	out := map[string][]string{}
	for d := range ch {
		s := d.String()
		n, l := name.FindStringSubmatch(s), labels.FindStringSubmatch(s)
		if n == nil || l == nil {
			t.Fatalf("cannot read the descriptor %s", s)
		}
		out[n[1]] = strings.FieldsFunc(l[1], func(r rune) bool { return r == ',' })
	}
	// A histogram's series.
	for _, h := range []string{"salvage_call_duration_seconds", "salvage_limit_wait_seconds", "salvage_job_duration_seconds"} {
		if _, ok := out[h]; !ok {
			t.Fatalf("histogram %s is not registered", h)
		}
		out[h+"_bucket"] = append(slices.Clone(out[h]), "le")
		out[h+"_sum"], out[h+"_count"] = out[h], out[h]
	}
	return out
}

// TestGrafanaDashboardNamesExportedMetrics reads docs/grafana/salvage.json
// and checks that every query names a metric /metrics exports, that
// each label a selector matches or a query groups by is one of that
// metric's, and that the dashboard shows every exported metric.
func TestGrafanaDashboardNamesExportedMetrics(t *testing.T) {
	t.Parallel()
	data, err := os.ReadFile(filepath.Join("..", "..", "..", "..", "docs", "grafana", "salvage.json"))
	if err != nil {
		t.Fatal(err)
	}
	var board struct {
		Title      string `json:"title"`
		Templating struct {
			List []struct {
				Definition string `json:"definition"`
			} `json:"list"`
		} `json:"templating"`
		Panels []struct {
			Type    string `json:"type"`
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(data, &board); err != nil {
		t.Fatalf("docs/grafana/salvage.json: %v", err)
	}
	metrics := exported(t)
	exprs := map[string]string{} // query -> where
	for _, p := range board.Panels {
		if p.Type == "row" {
			continue
		}
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for _, q := range p.Targets {
			exprs[q.Expr] = "panel " + p.Title
		}
	}
	for _, v := range board.Templating.List {
		if v.Definition != "" {
			exprs[v.Definition] = "variable"
		}
	}
	metricRef := regexp.MustCompile(`\b(salvage_[a-z0-9_]+)\b(\{[^}]*\})?`)
	matcher := regexp.MustCompile(`([a-z_]+)\s*(=~|!~|!=|=)`)
	groupBy := regexp.MustCompile(`\b(?:by|without)\s*\(([^)]*)\)`)
	used := map[string]bool{}
	for q, where := range exprs {
		refs := metricRef.FindAllStringSubmatch(q, -1)
		if len(refs) == 0 {
			t.Errorf("%s: %q names no salvage metric", where, q)
		}
		known := map[string]bool{}
		for _, r := range refs {
			labels, ok := metrics[r[1]]
			if !ok {
				t.Errorf("%s: %q names %s, which /metrics does not export", where, q, r[1])
				continue
			}
			used[strings.TrimSuffix(strings.TrimSuffix(strings.TrimSuffix(r[1], "_bucket"), "_sum"), "_count")] = true
			for _, l := range labels {
				known[l] = true
			}
			for _, m := range matcher.FindAllStringSubmatch(r[2], -1) {
				if !slices.Contains(labels, m[1]) {
					t.Errorf("%s: %q matches label %s, which %s does not have (%v)", where, q, m[1], r[1], labels)
				}
			}
		}
		for _, g := range groupBy.FindAllStringSubmatch(q, -1) {
			for _, l := range strings.Split(g[1], ",") {
				if l = strings.TrimSpace(l); l != "" && !known[l] {
					t.Errorf("%s: %q groups by %s, a label none of its metrics has", where, q, l)
				}
			}
		}
	}
	for name := range metrics {
		if base := strings.TrimSuffix(strings.TrimSuffix(strings.TrimSuffix(name, "_bucket"), "_sum"), "_count"); !used[base] {
			t.Errorf("the dashboard shows nothing of %s", base)
		}
	}
}
