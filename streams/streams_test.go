package streams_test

import (
	"context"
	"encoding/json"
	"errors"
	"math"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/salvagehq/salvage/salvagetest"
	"github.com/salvagehq/salvage/salvagetype"
	"github.com/salvagehq/salvage/streams"
)

func TestValidateToken(t *testing.T) {
	t.Parallel()
	tests := []struct {
		tok     string
		wantErr bool
	}{
		{"contract-review", false},
		{"01JABCDEFGHJKMNPQRSTVWXYZ0", false},
		{"a_b=c-D9", false},
		{strings.Repeat("x", salvagetype.MaxTokenLen), false},
		{"", true}, {"a.b", true}, {"a*", true}, {">", true}, {"a b", true}, {"a\tb", true}, {"a\nb", true},
		// Valid subject tokens that are not valid KV keys.
		{"job#1", true}, {"jöb", true}, {"a:b", true}, {"a/b", true}, {"a+b", true}, {"a$", true},
		{strings.Repeat("x", salvagetype.MaxTokenLen+1), true},
	}
	for _, tt := range tests {
		err := salvagetype.ValidateToken("pipeline", tt.tok)
		if (err != nil) != tt.wantErr || (err != nil && !errors.Is(err, salvagetype.ErrInvalidToken)) {
			t.Errorf("ValidateToken(%q) = %v, wantErr %v", tt.tok, err, tt.wantErr)
		}
	}
	// Every token that passes is a valid KV key and subject token.
	for _, tt := range tests {
		if !tt.wantErr && !regexp.MustCompile(`^[-/_=\.a-zA-Z0-9]+$`).MatchString(tt.tok) {
			t.Errorf("%q passed but is not a KV key", tt.tok)
		}
	}
	if err := salvagetype.ValidateToken("job_id", "jöb"); err == nil || !strings.Contains(err.Error(), `"ö"`) {
		t.Errorf("the error should name the whole offending rune: %v", err)
	}
	for _, id := range streams.ReservedJobIDs {
		if err := streams.ValidateJobID(id); !errors.Is(err, salvagetype.ErrInvalidToken) {
			t.Errorf("ValidateJobID(%q) = %v, want a reserved-word refusal", id, err)
		}
	}
	if err := streams.ValidateJobID("01JABCDEFGHJKMNPQRSTVWXYZ0"); err != nil {
		t.Errorf("a ULID job id refused: %v", err)
	}
}

func TestSubjects(t *testing.T) {
	t.Parallel()
	if p, err := streams.ParseJobSubject("salvage.jobs.contract-review"); err != nil || p != "contract-review" {
		t.Errorf("ParseJobSubject = %q, %v", p, err)
	}
	for _, s := range []string{"salvage.jobs.", "salvage.jobs.a.b", "salvage.other.a", "salvage.jobs"} {
		if _, err := streams.ParseJobSubject(s); !errors.Is(err, streams.ErrBadSubject) {
			t.Errorf("ParseJobSubject(%q) = %v, want ErrBadSubject", s, err)
		}
	}
	ref, err := streams.ParseChunkSubject(streams.ChunkRef{Pipeline: "p", Job: "J", Chunk: 7}.Subject())
	if err != nil || ref != (streams.ChunkRef{Pipeline: "p", Job: "J", Chunk: 7}) {
		t.Errorf("chunk subject round trip = %+v, %v", ref, err)
	}
	for _, s := range []string{"salvage.chunks.p.J", "salvage.chunks.p.J.0", "salvage.chunks.p.J.x", "salvage.dlq.p.J.1"} {
		if _, err := streams.ParseChunkSubject(s); !errors.Is(err, streams.ErrBadSubject) {
			t.Errorf("ParseChunkSubject(%q) = %v", s, err)
		}
	}
	if got := (streams.ChunkRef{Pipeline: "orders", Job: "J", Chunk: 3}).DLQ("TRANSIENT_NETWORK"); got != "salvage.dlq.TRANSIENT_NETWORK.orders.J.3" {
		t.Errorf("ChunkRef.DLQ = %s", got)
	}
}

func TestTraceParent(t *testing.T) {
	t.Parallel()
	id := streams.DeriveTraceID("job")
	if id != streams.DeriveTraceID("job") || len(id) != 32 {
		t.Fatalf("trace id %q is not stable 32 hex", id)
	}
	got, ok := streams.ParseTraceParent(streams.TraceParent(id, streams.DeriveSpanID("x")))
	if !ok || got != id {
		t.Fatalf("round trip = %q, %v", got, ok)
	}
	for _, bad := range []string{"", "00-xyz-abc-01", "00-00000000000000000000000000000000-0000000000000001-01"} {
		if _, ok := streams.ParseTraceParent(bad); ok {
			t.Errorf("ParseTraceParent(%q) accepted", bad)
		}
	}
}

func TestProvisionIsIdempotent(t *testing.T) {
	t.Parallel()
	b := salvagetest.StartServer(t)
	ctx := context.Background()
	for range 2 {
		if err := streams.Provision(ctx, b.JS, streams.Options{}); err != nil {
			t.Fatal(err)
		}
	}
	for _, name := range []string{streams.Jobs, streams.Chunks, streams.Backlog, streams.Hold, streams.Results, streams.DLQ, streams.Advisories, streams.Events} {
		if _, err := b.JS.Stream(ctx, name); err != nil {
			t.Errorf("stream %s: %v", name, err)
		}
	}
	if err := streams.Pipeline("p1").Provision(ctx, b.JS, streams.Options{}); err != nil {
		t.Fatal(err)
	}
	c, err := b.JS.Consumer(ctx, streams.Chunks, streams.Pipeline("p1").Workers())
	if err != nil {
		t.Fatal(err)
	}
	info, _ := c.Info(ctx)
	if info.Config.AckWait != salvagetype.AckWaitDefault || info.Config.MaxDeliver != salvagetype.MaxDeliverDefault || info.Config.FilterSubject != "salvage.chunks.p1.>" {
		t.Errorf("pool consumer = %+v", info.Config)
	}
	// Options change on re-provisioning (create or update).
	if err := streams.Pipeline("p1").Provision(ctx, b.JS, streams.Options{MaxDeliver: 5}); err != nil {
		t.Fatal(err)
	}
	info, _ = c.Info(ctx)
	if info.Config.MaxDeliver != 5 {
		t.Errorf("MaxDeliver after update = %d", info.Config.MaxDeliver)
	}
}

// TestProvisionedOnlyReads: a process that finds every stream and
// consumer carrying the fingerprint of the configuration it would ask
// for sends no create, update or delete request — so a user that may
// not change configuration can run once an administrator provisioned.
func TestProvisionedOnlyReads(t *testing.T) {
	t.Parallel()
	b := salvagetest.StartServer(t)
	ctx := context.Background()
	// Sync subscriptions: once a flush returns, every request the
	// provisioning sent is queued on them (the connection reads in order),
	// where an async handler might not have run yet.
	var subs []*nats.Subscription
	for _, subject := range []string{"$JS.API.STREAM.CREATE.>", "$JS.API.STREAM.UPDATE.>", "$JS.API.STREAM.DELETE.>",
		"$JS.API.CONSUMER.CREATE.>", "$JS.API.CONSUMER.DURABLE.CREATE.>", "$JS.API.CONSUMER.DELETE.>"} {
		sub, err := b.Conn.SubscribeSync(subject)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = sub.Unsubscribe() })
		subs = append(subs, sub)
	}
	var seen []string
	provision := func(o streams.Options) int {
		t.Helper()
		seen = nil
		if err := streams.Provision(ctx, b.JS, o); err != nil {
			t.Fatal(err)
		}
		for _, p := range []streams.Pipeline{"p1", "p2"} {
			if err := p.Provision(ctx, b.JS, o); err != nil {
				t.Fatal(err)
			}
		}
		if err := b.Conn.Flush(); err != nil {
			t.Fatal(err)
		}
		for _, sub := range subs {
			n, _, err := sub.Pending()
			if err != nil {
				t.Fatal(err)
			}
			for range n {
				m, err := sub.NextMsg(time.Second)
				if err != nil {
					t.Fatal(err)
				}
				seen = append(seen, m.Subject)
			}
		}
		return len(seen)
	}
	if n := provision(streams.Options{}); n == 0 {
		t.Fatal("the first provisioning sent no create request: the probe sees nothing")
	}
	if n := provision(streams.Options{}); n != 0 {
		t.Errorf("the second provisioning sent %d changes: %v", n, seen)
	}
	// Another configuration is a change again, and then current.
	if n := provision(streams.Options{MaxDeliver: 5}); n == 0 {
		t.Error("a new MaxDeliver changed nothing")
	}
	if n := provision(streams.Options{MaxDeliver: 5}); n != 0 {
		t.Errorf("provisioning MaxDeliver 5 twice sent %d changes the second time", n)
	}
}

func TestPrepareJobAndJobMessage(t *testing.T) {
	t.Parallel()
	id, body, err := streams.PrepareJob(map[string]json.RawMessage{"input": json.RawMessage(`{}`)})
	if err != nil || len(id) != 26 || !strings.Contains(string(body), id) {
		t.Fatalf("minted id %q, body %s, %v", id, body, err)
	}
	hash := streams.InputHash("p", json.RawMessage(`{}`))
	m := streams.JobMessage("p", id, hash, body, "")
	if m.Subject != "salvage.jobs.p" || m.Header.Get(salvagetype.HeaderMsgID) != id+"."+hash[:16] {
		t.Fatalf("message %s %v", m.Subject, m.Header)
	}
	if _, ok := streams.ParseTraceParent(m.Header.Get(salvagetype.HeaderTraceParent)); !ok {
		t.Fatalf("no traceparent minted: %v", m.Header)
	}
	tp := streams.TraceParent(streams.DeriveTraceID("x"), streams.DeriveSpanID("x"))
	if got := streams.JobMessage("p", "mine", hash, body, tp); got.Header.Get(salvagetype.HeaderTraceParent) != tp || got.Header.Get(salvagetype.HeaderMsgID) != "mine."+hash[:16] {
		t.Fatalf("a given traceparent kept, the id and input in Nats-Msg-Id: %v", got.Header)
	}
	// The same input, however it is written, hashes the same; another
	// input or pipeline does not.
	same := streams.InputHash("p", json.RawMessage(` {"b": 1.50, "a": [1, "x"]} `))
	if same != streams.InputHash("p", json.RawMessage(`{"a":[1,"x"],"b":1.50}`)) ||
		same == streams.InputHash("p", json.RawMessage(`{"a":[1,"x"],"b":1.5}`)) || same == streams.InputHash("q", json.RawMessage(`{"a":[1,"x"],"b":1.50}`)) {
		t.Fatal("InputHash is not canonical")
	}
	for _, b := range []salvagetype.Budget{{Tokens: -1}, {Cost: -0.01}, {Cost: math.NaN()}, {Cost: math.Inf(1)}, {Cost: 2e9}, {Tokens: 2e12}} {
		if err := b.Validate(); !errors.Is(err, salvagetype.ErrInvalidJob) {
			t.Errorf("budget %+v accepted: %v", b, err)
		}
	}
	if err := (&salvagetype.Budget{Tokens: 1000, Cost: 0.5}).Validate(); err != nil {
		t.Errorf("a valid budget refused: %v", err)
	}
	for _, tc := range []struct {
		msg  string
		want error
	}{
		{`{"metadata": {}}`, salvagetype.ErrInvalidJob},
		{`{"input": 1, "job_id": 5}`, salvagetype.ErrInvalidJob},
		{`{"input": 1, "job_id": "a.b"}`, salvagetype.ErrInvalidToken},
		{`{"input": 1, "job_id": "job#1"}`, salvagetype.ErrInvalidToken},
		{`{"input": 1, "job_id": ""}`, salvagetype.ErrInvalidToken},
		{`{"input": 1, "job_id": "rejected"}`, salvagetype.ErrInvalidToken},
	} {
		var msg map[string]json.RawMessage
		_ = json.Unmarshal([]byte(tc.msg), &msg)
		if _, _, err := streams.PrepareJob(msg); !errors.Is(err, tc.want) {
			t.Errorf("PrepareJob(%s) = %v, want %v", tc.msg, err, tc.want)
		}
	}
}

// TestFindWaitingJobAcrossGaps: a job message is found behind the gaps
// its acked predecessors leave in the work queue, and an id no message
// carries is not, after reading only the messages the stream holds.
func TestFindWaitingJobAcrossGaps(t *testing.T) {
	t.Parallel()
	b := salvagetest.StartServer(t)
	ctx := context.Background()
	if err := streams.Provision(ctx, b.JS, streams.Options{}); err != nil {
		t.Fatal(err)
	}
	s, err := b.JS.Stream(ctx, streams.Jobs)
	if err != nil {
		t.Fatal(err)
	}
	var seqs []uint64
	for _, id := range []string{"01JGONE0000000000000000001", "01JGONE0000000000000000002", "01JWAITING0000000000000003"} {
		ack, err := b.JS.Publish(ctx, "salvage.jobs.p", []byte(`{"job_id":"`+id+`","input":{}}`))
		if err != nil {
			t.Fatal(err)
		}
		seqs = append(seqs, ack.Sequence)
	}
	for _, seq := range seqs[:2] {
		if err := s.DeleteMsg(ctx, seq); err != nil {
			t.Fatal(err)
		}
	}
	if w, ok := streams.FindWaitingJob(ctx, b.JS, "01JWAITING0000000000000003"); !ok || w.Pipeline != "p" || w.Seq != seqs[2] {
		t.Fatalf("the waiting job behind two gaps: %+v %v", w, ok)
	}
	if _, ok := streams.FindWaitingJob(ctx, b.JS, "01JGONE0000000000000000001"); ok {
		t.Fatal("a job whose message is gone was found waiting")
	}
}
