package spec_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/salvagehq/salvage"
	"github.com/salvagehq/salvage/cmd/salvage/internal/contractreview"
	"github.com/salvagehq/salvage/cmd/salvage/internal/orders"
	"github.com/salvagehq/salvage/cmd/salvage/internal/spec"
)

const good = `pipelines:
  - name: review
    split: paragraphs
    max_chunks: 100
    concurrency: 2
    ack_wait: 45s
    max_deliver: 5
    retention:
      calls: 10m
      records: 2160h
    stages:
      - name: analyze
        agents:
          - name: reviewer
            subject: agents.reviewer
            timeout: 5s
      - name: pay
        optional: true
        agents:
          - name: cashier
            tool: charge
    tools:
      - name: charge
        subject: tools.charge
        system: payments
        effect:
          reversible: true
          compensation: refund
          verify_subject: tools.charge.verify
      - name: refund
        subject: tools.refund
`

func TestParse(t *testing.T) {
	t.Parallel()
	ps, err := spec.Parse("p.yaml", []byte(good))
	if err != nil {
		t.Fatal(err)
	}
	p := ps[0]
	if p.Name != "review" || p.MaxChunks != 100 || len(p.Stages) != 2 || !p.Stages[1].Optional || len(p.Tools) != 2 ||
		p.Concurrency != 2 || p.AckWait.Seconds() != 45 || p.MaxDeliver != 5 ||
		p.Retention.Calls != 10*time.Minute || p.Retention.Effects != 0 || p.Retention.Records != 90*24*time.Hour {
		t.Fatalf("pipeline = %+v", p)
	}
	if a := p.Stages[0].Agents[0]; a.Subject != "agents.reviewer" || a.Timeout.Seconds() != 5 || a.Run != nil {
		t.Errorf("agent = %+v", a)
	}
	if a := p.Stages[1].Agents[0]; a.Run == nil || a.Subject != "" {
		t.Errorf("a tool step is an agent that calls the tool: %+v", a)
	}
	if e := p.Tools[0].Effect; e == nil || !e.Reversible || e.Compensation != "refund" || e.VerifySubject != "tools.charge.verify" {
		t.Errorf("effect = %+v", e)
	}
	// JSON is YAML too.
	if _, err := spec.Parse("p.json", []byte(`{"pipelines": [{"name": "j", "split": "items", "stages": [{"name": "s", "agents": [{"name": "a", "subject": "x.y"}]}]}]}`)); err != nil {
		t.Errorf("JSON: %v", err)
	}
}

// TestErrorsNameTheLine: every mistake is reported with the file and the
// line it is on.
func TestErrorsNameTheLine(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name, old, new, want string
	}{
		{"unknown split", "split: paragraphs", "split: sentences", "p.yaml:3: split \"sentences\""},
		{"unknown field", "max_chunks: 100", "max_chunk: 100", "[4:5] unknown field \"max_chunk\""},
		{"agent without subject or tool", "            subject: agents.reviewer\n", "", "p.yaml:14: agent reviewer needs a subject"},
		{"undeclared tool", "tool: charge", "tool: charger", "p.yaml:21: tool charger is not declared"},
		{"bad timeout", "timeout: 5s", "timeout: soon", "p.yaml:16: \"soon\""},
		{"bad name", "name: review", "name: re.view", "p.yaml:2: bad subject token: pipeline name \"re.view\""},
		{"effect without verify", "          verify_subject: tools.charge.verify\n", "", "p.yaml:27: a side effect needs a verify_subject"},
		{"undeclared compensation", "compensation: refund", "compensation: refunds", "p.yaml:28: compensation tool refunds"},
		{"not YAML", "pipelines:", "pipelines: [", "p.yaml"},
		{"bad ack_wait", "ack_wait: 45s", "ack_wait: soon", "p.yaml:6: \"soon\""},
		{"negative concurrency", "concurrency: 2", "concurrency: -1", "p.yaml:5: concurrency must not be negative"},
		{"the server's API", "subject: agents.reviewer", "subject: $JS.API.STREAM.DELETE.SALVAGE_DLQ", "p.yaml:15: salvage: invalid config: agent reviewer subject \"$JS.API.STREAM.DELETE.SALVAGE_DLQ\": subjects starting with $"},
		{"another's replies", "subject: tools.refund", "subject: _INBOX_operator.x", "p.yaml:31: salvage: invalid config: tool refund subject \"_INBOX_operator.x\": subjects starting with _INBOX"},
		{"Salvage's own", "verify_subject: tools.charge.verify", "verify_subject: salvage.api.dlq.bulk", "p.yaml:29: salvage: invalid config: tool charge verify subject \"salvage.api.dlq.bulk\""},
		{"a wildcard", "subject: tools.charge", "subject: tools.*", "p.yaml:24: salvage: invalid config: tool charge subject \"tools.*\": want tokens"},
		{"bad retention", "calls: 10m", "calls: soon", "p.yaml:9: \"soon\""},
		{"retention past the events", "calls: 10m", "calls: 200h", "p.yaml:9: invalid retention: calls 200h0m0s is over 168h0m0s"},
		{"its own compensation", "compensation: refund", "compensation: charge", "p.yaml:28: charge is undone by itself"},
		{"a built-in's name", "name: review", "name: order-fulfillment", "p.yaml:2: pipeline name order-fulfillment is reserved"},
		{"the other built-in's", "name: review", "name: contract-review", "p.yaml:2: pipeline name contract-review is reserved"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			doc := strings.Replace(good, tt.old, tt.new, 1)
			_, err := spec.Parse("p.yaml", []byte(doc))
			if !errors.Is(err, spec.ErrInvalid) || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %v; want one containing %q", err, tt.want)
			}
		})
	}
}

// The names reserved are the built-in pipelines'.
func TestReservedAreTheBuiltIns(t *testing.T) {
	t.Parallel()
	if !slices.Equal(spec.Reserved, []string{contractreview.Name, orders.Name}) {
		t.Fatalf("reserved %v", spec.Reserved)
	}
}

// A file's pipeline's definition covers what its agents call, so two
// files whose pipelines differ only there have two fingerprints; tuning
// does not count.
func TestFileDefinitionsDiffer(t *testing.T) {
	t.Parallel()
	fp := func(doc string) string {
		t.Helper()
		ps, err := spec.Parse("p.yaml", []byte(doc))
		if err != nil {
			t.Fatal(err)
		}
		f, err := ps[0].Fingerprint()
		if err != nil {
			t.Fatal(err)
		}
		return f
	}
	base := fp(good)
	if tuned := fp(strings.Replace(good, "concurrency: 2", "concurrency: 7", 1)); tuned != base {
		t.Errorf("tuning changed the fingerprint")
	}
	if other := fp(strings.Replace(good, "split: paragraphs", "split: whole", 1)); other == base {
		t.Errorf("another split kept the fingerprint")
	}
}

// TestLimitsInTheFile: a pipelines file declares rate limits beside its
// pipelines; a limit that cannot be kept, or one key twice, is refused
// with the line it is on.
func TestLimitsInTheFile(t *testing.T) {
	write := func(body string) string {
		path := filepath.Join(t.TempDir(), "p.yaml")
		if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	d, err := spec.LoadFile(context.Background(), write(good+`limits:
  - key: system.model-api_openai_com
    requests_per_minute: 600
    tokens_per_minute: 200000
  - key: tool.charge
    in_flight: 4
`), nil)
	if err != nil {
		t.Fatal(err)
	}
	want := []salvage.Limit{{Key: "system.model-api_openai_com", RequestsPerMinute: 600, TokensPerMinute: 200_000}, {Key: "tool.charge", InFlight: 4}}
	if len(d.Pipelines) != 1 || !slices.Equal(d.Limits, want) {
		t.Fatalf("declared %d pipelines, limits %+v; want 1 and %+v", len(d.Pipelines), d.Limits, want)
	}
	for _, bad := range []string{
		"limits:\n  - key: region.eu\n    requests_per_minute: 1\n",
		"limits:\n  - key: system.crm\n",
		"limits:\n  - key: system.crm\n    requests_per_minute: 5\n  - key: system.crm\n    in_flight: 1\n",
	} {
		_, err := spec.LoadFile(context.Background(), write(good+bad), nil)
		if !errors.Is(err, spec.ErrInvalid) || !strings.Contains(err.Error(), "p.yaml:") {
			t.Errorf("%q: %v; want ErrInvalid naming the line", bad, err)
		}
	}
}
