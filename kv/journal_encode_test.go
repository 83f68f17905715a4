package kv

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/salvagehq/salvage/salvagetype"
)

// TestEncodeRowIsJSONMarshal: the hand-written encoder writes the bytes
// json.Marshal writes, for rows on its fast path and rows that fall back,
// and every row decodes to what was encoded.
func TestEncodeRowIsJSONMarshal(t *testing.T) {
	now := time.Date(2026, 12, 4, 1, 2, 3, 456789000, time.UTC)
	full := JournalRow{Call: salvagetype.Call{Key: "01JOB.3.0.2.commercial.7", Job: "01JOB", Chunk: 3, Stage: 2, Agent: "commercial", Seq: 7, Tool: "refund", System: "payments", InputHash: "abcd", Output: json.RawMessage(`{"refund_id":"r-1","amount":12.5}`), Status: salvagetype.CallSucceeded, IdempotencyKey: "f00d", Attempts: 2, LatencyMS: 12.345, Fingerprint: &salvagetype.Fingerprint{System: "payments", ResourceID: "r-1", Reversible: true, Compensation: "cancel-refund", CompensationKey: "k"}, Error: "earlier: 503", ErrorClass: "transient", ErrorStatus: 503, Verified: true, Usage: &salvagetype.Usage{Model: "m", PromptTokens: 120, CompletionTokens: 3}, Orphan: true, TraceID: "0af7651916cd43dd8448eb211c80319c", StartedAt: now, FinishedAt: now.Add(time.Millisecond), RetentionRewrite: true, History: []salvagetype.CallAttempt{{Status: salvagetype.CallFailed, Error: "boom", Attempts: 4, StartedAt: now}}}, RetryableAfterCompensation: true, HistoryDropped: 2}
	rows := map[string]JournalRow{
		"zero":            {},
		"initiated":       {Call: salvagetype.Call{Key: "j.1.0.1.a.1", Job: "j", Chunk: 1, Stage: 1, Agent: "a", Seq: 1, Tool: "t", InputHash: "h", Status: salvagetype.CallInitiated, IdempotencyKey: "k", StartedAt: now}},
		"every field":     full,
		"usage no model":  {Call: salvagetype.Call{Usage: &salvagetype.Usage{PromptTokens: 1}, StartedAt: now}},
		"zone offset":     {Call: salvagetype.Call{StartedAt: now.In(time.FixedZone("x", 5*3600+30*60))}},
		"html in error":   {Call: salvagetype.Call{Error: "<b> & </b>", StartedAt: now}},
		"unicode agent":   {Call: salvagetype.Call{Agent: "analyste-privé", StartedAt: now}},
		"control in text": {Call: salvagetype.Call{Error: "line\nnext\t\"quoted\" \\", StartedAt: now}},
		"tiny latency":    {Call: salvagetype.Call{LatencyMS: 1e-9, StartedAt: now}},
		"huge latency":    {Call: salvagetype.Call{LatencyMS: 1e22, StartedAt: now}},
		"negative":        {Call: salvagetype.Call{LatencyMS: -0.5, Chunk: -1, StartedAt: now}},
		"year 10000":      {Call: salvagetype.Call{StartedAt: time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC)}},
		"output spaced":   {Call: salvagetype.Call{Output: json.RawMessage(" [1, 2,\n 3] "), StartedAt: now}},
		"output a string": {Call: salvagetype.Call{Output: json.RawMessage(`"7"`), StartedAt: now}},
	}
	for name, row := range rows {
		t.Run(name, func(t *testing.T) {
			got, gotErr := encodeRow(&row)
			want, wantErr := json.Marshal(row)
			if (gotErr != nil) != (wantErr != nil) {
				t.Fatalf("encodeRow error %v, json.Marshal error %v", gotErr, wantErr)
			}
			if gotErr != nil {
				return
			}
			if !bytes.Equal(got, want) {
				t.Fatalf("encodeRow wrote\n%s\njson.Marshal\n%s", got, want)
			}
			var back JournalRow
			if err := json.Unmarshal(got, &back); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestEncodeRowRefusesBadOutput: an output that is not one JSON value is
// an error, as with json.Marshal, and NaN latency falls back to it (and
// fails there too).
func TestEncodeRowRefusesBadOutput(t *testing.T) {
	for _, out := range []string{`{"a":`, `1 2`, `nope`} {
		row := JournalRow{Call: salvagetype.Call{Key: "k", Output: json.RawMessage(out)}}
		if _, err := encodeRow(&row); err == nil {
			t.Errorf("output %q encoded", out)
		}
	}
	row := JournalRow{Call: salvagetype.Call{Key: "k", LatencyMS: math.NaN()}}
	var unsupported *json.UnsupportedValueError
	if _, err := encodeRow(&row); !errors.As(err, &unsupported) {
		t.Errorf("NaN latency: %v, want json.UnsupportedValueError", err)
	}
}

// TestEncodeRowRandomRows compares with json.Marshal on random rows.
func TestEncodeRowRandomRows(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	pieces := []string{"", "a", "model", "01JOB", "<", "&", "é", "\n", `"`, "\\", "\u2028", "\xff", "x.y", " "}
	str := func() string {
		var b strings.Builder
		for range r.IntN(4) {
			b.WriteString(pieces[r.IntN(len(pieces))])
		}
		return b.String()
	}
	outputs := []string{"", `{}`, `{"content":"7","usage":{"prompt_tokens":3}}`, `[1,2]`, `null`, `"s"`}
	for i := range 2000 {
		row := JournalRow{Call: salvagetype.Call{Key: str(), Job: str(), Chunk: r.IntN(1000), Epoch: r.IntN(3), Stage: r.IntN(5), Agent: str(), Seq: r.IntN(200), Tool: str(), System: str(), InputHash: str(), Output: json.RawMessage(outputs[r.IntN(len(outputs))]), Status: salvagetype.CallStatus(str()), IdempotencyKey: str(), Attempts: r.IntN(5), LatencyMS: r.Float64() * math.Pow(10, float64(r.IntN(12)-4)), LimitWaitMS: float64(r.IntN(3)) * r.Float64() * 1000, Error: str(), ErrorClass: str(), ErrorStatus: r.IntN(600), Verified: r.IntN(2) == 0, Orphan: r.IntN(2) == 0, TraceID: str(), StartedAt: time.Unix(r.Int64N(4e9), r.Int64N(1e9)).UTC(), RetentionRewrite: r.IntN(2) == 0}, RetryableAfterCompensation: r.IntN(2) == 0, HistoryDropped: r.IntN(3)}
		if r.IntN(2) == 0 {
			row.FinishedAt = row.StartedAt.Add(time.Duration(r.IntN(1e9)))
		}
		if r.IntN(2) == 0 {
			row.Usage = &salvagetype.Usage{Model: str(), PromptTokens: r.Int64N(1e6), CompletionTokens: r.Int64N(1e4)}
		}
		if r.IntN(4) == 0 {
			row.Fingerprint = &salvagetype.Fingerprint{System: str(), Reversible: r.IntN(2) == 0}
		}
		if r.IntN(8) == 0 {
			row.History = []salvagetype.CallAttempt{{Status: salvagetype.CallStatus(str()), Error: str(), StartedAt: row.StartedAt}}
		}
		got, err := encodeRow(&row)
		if err != nil {
			t.Fatalf("row %d: %v", i, err)
		}
		want, _ := json.Marshal(row)
		if !bytes.Equal(got, want) {
			t.Fatalf("row %d: encodeRow wrote\n%s\njson.Marshal\n%s", i, got, want)
		}
		var back JournalRow
		if err := json.Unmarshal(got, &back); err != nil {
			t.Fatal(err)
		}
		if back.Key != row.Key && utf8.ValidString(row.Key) {
			t.Fatalf("row %d: key %q decoded as %q", i, row.Key, back.Key)
		}
	}
}

// TestIdempotencyKeyIsTheContractsHash: the key external systems see is
// sha256 of job, chunk, epoch, stage, agent and seq joined by NUL bytes,
// numbers in decimal — the same bytes fmt wrote before keys were built
// without it, so keys minted by earlier releases still match.
func TestIdempotencyKeyIsTheContractsHash(t *testing.T) {
	if got, want := IdempotencyKey("01JOB", 3, 0, 2, "commercial", 7), "da5816e4e6ffc9d5bfddc26a4986e39bc8e30743dda9aaba4cc6705da16ec736"; got != want {
		t.Errorf("IdempotencyKey = %s, want %s (python3: hashlib.sha256(b'01JOB\\x003\\x000\\x002\\x00commercial\\x007'))", got, want)
	}
	for _, c := range []struct {
		job, agent               string
		chunk, epoch, stage, seq int
	}{{"j", "a", 1, 0, 1, 1}, {"", "", 0, 0, 0, 0}, {"01KABC", "analyste-privé", 10000, 3, 12, 116}, {"x", "y", -1, -2, -3, -4}} {
		sum := sha256.Sum256([]byte(fmt.Sprintf("%s\x00%d\x00%d\x00%d\x00%s\x00%d", c.job, c.chunk, c.epoch, c.stage, c.agent, c.seq)))
		if got, want := IdempotencyKey(c.job, c.chunk, c.epoch, c.stage, c.agent, c.seq), hex.EncodeToString(sum[:]); got != want {
			t.Errorf("IdempotencyKey%v = %s, want %s", c, got, want)
		}
	}
}

// BenchmarkEncodeRow writes a model call's SUCCEEDED row, as every pure
// call does, by json.Marshal and by encodeRow.
func BenchmarkEncodeRow(b *testing.B) {
	now := time.Now().UTC()
	row := JournalRow{Call: salvagetype.Call{Key: JournalKey("01KBENCHJOB000000000000000", 5, 0, 2, "commercial", 9), Job: "01KBENCHJOB000000000000000", Chunk: 5, Stage: 2, Agent: "commercial", Seq: 9, Tool: "model", System: "model", InputHash: "cf07194ee232eb531e15f690000d1984", Output: json.RawMessage(`{"content":"7","finish_reason":"stop","usage":{"model":"salvage-sim","prompt_tokens":120,"completion_tokens":1}}`), Status: salvagetype.CallSucceeded, IdempotencyKey: IdempotencyKey("01KBENCHJOB000000000000000", 5, 0, 2, "commercial", 9), Attempts: 1, LatencyMS: 0.012, TraceID: "0af7651916cd43dd8448eb211c80319c", Usage: &salvagetype.Usage{Model: "salvage-sim", PromptTokens: 120, CompletionTokens: 1}, StartedAt: now, FinishedAt: now.Add(12 * time.Microsecond)}}
	b.Run("json.Marshal", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := json.Marshal(row); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("encodeRow", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := encodeRow(&row); err != nil {
				b.Fatal(err)
			}
		}
	})
}
