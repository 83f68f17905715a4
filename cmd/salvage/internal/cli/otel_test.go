package cli_test

import (
	"compress/gzip"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	coltrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"

	"github.com/salvagehq/salvage"
	"github.com/salvagehq/salvage/cmd/salvage/internal/contractreview"
	"github.com/salvagehq/salvage/cmd/salvage/internal/demo"
	"github.com/salvagehq/salvage/cmd/salvage/internal/operator"
	"github.com/salvagehq/salvage/salvagetest"
)

// span is one span as the OTLP receiver decoded it.
type span struct {
	trace, id, parent, name string
	attrs                   map[string]string
	failed                  bool
}

// otlpReceiver is an OTLP/HTTP trace receiver on loopback: it decodes
// every export request and keeps the spans.
type otlpReceiver struct {
	*httptest.Server
	mu    sync.Mutex
	spans []span
}

func startOTLPReceiver(t *testing.T) *otlpReceiver {
	t.Helper()
	r := &otlpReceiver{}
	r.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if req.Method != http.MethodPost || req.URL.Path != "/v1/traces" || req.Header.Get("Content-Type") != "application/x-protobuf" {
			t.Errorf("OTLP receiver: %s %s (%s)", req.Method, req.URL.Path, req.Header.Get("Content-Type"))
			http.Error(w, "want POST /v1/traces, application/x-protobuf", http.StatusBadRequest)
			return
		}
		var body io.Reader = req.Body
		if req.Header.Get("Content-Encoding") == "gzip" {
			zr, err := gzip.NewReader(req.Body)
			if err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			body = zr
		}
		data, err := io.ReadAll(body)
		var export coltrace.ExportTraceServiceRequest
		if err == nil {
			err = proto.Unmarshal(data, &export)
		}
		if err != nil {
			t.Errorf("OTLP receiver: %v", err)
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		r.mu.Lock()
		for _, rs := range export.ResourceSpans {
			for _, ss := range rs.ScopeSpans {
				for _, s := range ss.Spans {
					r.spans = append(r.spans, decodeSpan(s))
				}
			}
		}
		r.mu.Unlock()
		out, _ := proto.Marshal(&coltrace.ExportTraceServiceResponse{})
		w.Header().Set("Content-Type", "application/x-protobuf")
		_, _ = w.Write(out)
	}))
	t.Cleanup(r.Close)
	return r
}

func decodeSpan(s *tracepb.Span) span {
	d := span{trace: hex.EncodeToString(s.TraceId), id: hex.EncodeToString(s.SpanId), parent: hex.EncodeToString(s.ParentSpanId),
		name: s.Name, attrs: map[string]string{}, failed: s.Status != nil && s.Status.Code == tracepb.Status_STATUS_CODE_ERROR}
	for _, kv := range s.Attributes {
		switch v := kv.Value.GetValue().(type) {
		case *commonpb.AnyValue_StringValue:
			d.attrs[kv.Key] = v.StringValue
		case *commonpb.AnyValue_IntValue:
			d.attrs[kv.Key] = strconv.FormatInt(v.IntValue, 10)
		case *commonpb.AnyValue_BoolValue:
			d.attrs[kv.Key] = strconv.FormatBool(v.BoolValue)
		}
	}
	return d
}

// inTrace returns the spans of trace id.
func (r *otlpReceiver) inTrace(id string) []span {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []span
	for _, s := range r.spans {
		if s.trace == id {
			out = append(out, s)
		}
	}
	return out
}

// TestOneTracePerJobOverOTLP runs a contract review on two processes,
// with model calls failing and no tier-1 retries so chunks are
// dead-lettered and recovered, and an OTLP/HTTP receiver as the
// collector: the job is one trace whose spans form one tree — the job
// at the root, its chunk deliveries and recoveries under it, stages
// under chunks, agent turns under stages, calls under turns — with the
// attributes an operator filters on.
func TestOneTracePerJobOverOTLP(t *testing.T) {
	t.Parallel()
	rcv := startOTLPReceiver(t)
	env := append(os.Environ(), "OTEL_EXPORTER_OTLP_ENDPOINT="+rcv.URL, "OTEL_BSP_SCHEDULE_DELAY=100", "OTEL_SERVICE_NAME=salvage-test")
	start := func(args ...string) string {
		cmd := exec.Command(binary, append([]string{"up", "--http", "127.0.0.1:0", "--log-format", "json", "--log-level", "warn", "--demo-pipelines",
			"--model-latency", "1ms", "--model-failure-rate", "0.15", "--retries", "0", "--max-deliver", "1"}, append(args, fastTiers...)...)...)
		demo.DieWithParent(cmd)
		cmd.Env = env
		return startPrinting(t, cmd, "NATS_URL=")
	}
	url := start("--listen", "127.0.0.1:-1", "--store", t.TempDir())
	start("--server", url, "--role", "worker")

	contract := writeFile(t, "contract.txt", contractreview.Contract(6, 2))
	code, out, errOut := run(t, "", "submit", "contract-review", contract, "--wait", "--server", url)
	if code == operator.ExitError {
		t.Fatalf("submit exit %d: %s", code, errOut)
	}
	job := strings.TrimSpace(out)
	var st struct {
		Job salvage.Job `json:"job"`
	}
	// Recoveries re-run dead-lettered chunks after the job first
	// finished: wait until every envelope of the job is settled and the
	// job with it.
	settled := map[string]bool{"resolved": true, "superseded": true, "escalated": true, "dead-end": true, "abandoned": true}
	salvagetest.Eventually(t, 60*time.Second, func() bool {
		var recs []struct {
			Status string `json:"status"`
		}
		code, out, _ := run(t, "", "dlq", "ls", "--job", job, "--json", "--server", url)
		if code != 0 || jsonItems(out, &recs) != nil {
			return false
		}
		for _, r := range recs {
			if !settled[r.Status] {
				return false
			}
		}
		_, out, _ = run(t, "", "status", job, "--json", "--server", url)
		return json.Unmarshal([]byte(out), &st) == nil && st.Job.Status.Finished()
	}, "every envelope of job %s to settle", job)
	if st.Job.TraceID == "" {
		t.Fatalf("job %+v has no trace id", st.Job)
	}
	root, ok := salvage.JobSpanContext(st.Job.TraceID, job)
	if !ok {
		t.Fatalf("trace id %q", st.Job.TraceID)
	}
	// The job's span is exported when it finishes; the last chunk's and
	// a recovery's spans may end a moment later: wait for a whole tree.
	var spans []span
	var missing struct {
		Spans   int
		Missing string
	}
	salvagetest.Eventually(t, time.Minute, func() bool {
		spans = rcv.inTrace(st.Job.TraceID)
		missing.Spans = len(spans)
		ids, done := map[string]bool{}, map[string]bool{}
		for _, s := range spans {
			ids[s.id] = true
			if strings.HasPrefix(s.name, "chunk ") && s.attrs["salvage.status"] == "done" {
				done[s.attrs["salvage.chunk"]] = true
			}
		}
		if !ids[root.SpanID().String()] || len(done) < st.Job.Summary.Done {
			missing.Missing = fmt.Sprintf("job span %v, %d of %d done chunks' spans", ids[root.SpanID().String()], len(done), st.Job.Summary.Done)
			return false
		}
		for _, s := range spans {
			if s.parent != "" && !ids[s.parent] {
				missing.Missing = fmt.Sprintf("the parent %s of span %q (chunk %s)", s.parent, s.name, s.attrs["salvage.chunk"])
				return false
			}
		}
		return true
	}, "the job's whole tree of spans to arrive (%+v)", &missing)

	byID := map[string]span{}
	kinds := map[string][]span{}
	for _, s := range spans {
		if _, dup := byID[s.id]; dup {
			t.Errorf("span id %s exported twice (%s)", s.id, s.name)
		}
		byID[s.id] = s
		kinds[strings.Fields(s.name)[0]] = append(kinds[strings.Fields(s.name)[0]], s)
		if s.attrs["salvage.job_id"] != job {
			t.Errorf("span %q has job %q; want %s", s.name, s.attrs["salvage.job_id"], job)
		}
	}
	// The job's span is its first finish; each later one (a recovery
	// re-ran a chunk) is a "finished again" span under it, the last with
	// the job's status now.
	jobSpans, again := kinds["job"], kinds["finished"]
	if len(jobSpans) != 1 || jobSpans[0].parent != "" || jobSpans[0].name != "job contract-review" || jobSpans[0].attrs["salvage.chunks"] != "6" {
		t.Fatalf("job spans %+v; want one root for job %s", jobSpans, job)
	}
	last := jobSpans[0]
	for _, s := range again {
		if s.attrs["salvage.finishes"] > last.attrs["salvage.finishes"] {
			last = s
		}
	}
	if last.attrs["salvage.status"] != string(st.Job.Status) {
		t.Errorf("the last finish says %s; the job is %s", last.attrs["salvage.status"], st.Job.Status)
	}
	// Every span hangs from the job's, through a parent of the kind
	// above it.
	parentKind := map[string]string{"chunk": "job", "recovery": "job", "finished": "job", "stage": "chunk", "agent": "stage", "call": "agent"}
	for kind, want := range parentKind {
		if len(kinds[kind]) == 0 && kind != "finished" {
			t.Errorf("no %s spans in the trace (kinds %v)", kind, keys(kinds))
		}
		for _, s := range kinds[kind] {
			p, ok := byID[s.parent]
			if !ok || strings.Fields(p.name)[0] != want {
				t.Errorf("%s span %q has parent %q (%q); want a %s span of the trace", kind, s.name, s.parent, p.name, want)
			}
		}
	}
	if len(byID) != len(kinds["job"])+len(kinds["finished"])+len(kinds["chunk"])+len(kinds["recovery"])+len(kinds["stage"])+len(kinds["agent"])+len(kinds["call"]) {
		t.Errorf("span kinds %v: some span is none of job, chunk, recovery, stage, agent, call", keys(kinds))
	}
	done := map[string]bool{}
	for _, s := range kinds["chunk"] {
		if s.attrs["salvage.status"] == "done" {
			done[s.attrs["salvage.chunk"]] = true
		}
	}
	if len(done) != st.Job.Summary.Done {
		t.Errorf("chunk spans done for chunks %v; the job counts %d done", done, st.Job.Summary.Done)
	}
	tokens, failedCalls := false, 0
	for _, s := range kinds["call"] {
		if s.attrs["salvage.tool"] == "" || s.attrs["salvage.status"] == "" || s.attrs["salvage.attempts"] == "" || s.attrs["salvage.stage"] == "" || s.attrs["salvage.agent"] == "" {
			t.Fatalf("call span without its attributes: %+v", s)
		}
		if s.attrs["salvage.tokens.prompt"] != "" && s.attrs["salvage.tokens.prompt"] != "0" {
			tokens = true
		}
		if s.failed {
			failedCalls++
		}
	}
	if !tokens || failedCalls == 0 {
		t.Errorf("call spans: tokens seen %v, %d failed; want model usage and the injected failures", tokens, failedCalls)
	}
	for _, s := range kinds["recovery"] {
		if s.attrs["salvage.envelope_id"] == "" || s.attrs["salvage.strategy"] == "" || s.attrs["salvage.category"] == "" {
			t.Errorf("recovery span without its attributes: %+v", s)
		}
	}
	t.Logf("job %s (%s, finished %d times): %d spans: %d chunk deliveries, %d recoveries, %d stages, %d agent turns, %d calls (%d failed)",
		job, st.Job.Status, len(again)+1, len(spans), len(kinds["chunk"]), len(kinds["recovery"]), len(kinds["stage"]), len(kinds["agent"]), len(kinds["call"]), failedCalls)
}

func keys[V any](m map[string]V) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}
