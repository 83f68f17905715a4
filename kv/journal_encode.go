package kv

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"time"
)

// encodeRow is json.Marshal(row) without reflection: a row is written for
// every call, and encoding/json's reflective encoder was the largest cost
// of a pure call's write (salvage bench). The bytes are json.Marshal's,
// except that the output is compacted without escaping <, > and & (the
// same JSON value). A row the fast path does not handle (a string that
// needs escaping, a float in exponent notation, a time outside years
// 0-9999) is encoded by json.Marshal.
func encodeRow(row *JournalRow) ([]byte, error) {
	b, ok, err := appendRow(make([]byte, 0, 768+len(row.Output)), row)
	if err != nil {
		return nil, fmt.Errorf("kv: encode journal row %s: output: %w", row.Key, err)
	}
	if !ok {
		data, err := json.Marshal(row)
		if err != nil {
			return nil, fmt.Errorf("kv: encode journal row %s: %w", row.Key, err)
		}
		return data, nil
	}
	return b, nil
}

// appendRow appends row's JSON to b. It reports false when a field needs
// json.Marshal, and an error when the output is not one JSON value.
func appendRow(b []byte, row *JournalRow) ([]byte, bool, error) {
	w := rowWriter{b: append(b, '{'), ok: true}
	w.str("key", row.Key, false)
	w.str("job_id", row.Job, false)
	w.num("chunk", row.Chunk, false)
	w.num("epoch", row.Epoch, false)
	w.num("stage", row.Stage, false)
	w.str("agent", row.Agent, false)
	w.num("seq", row.Seq, false)
	w.str("tool", row.Tool, false)
	w.str("system", row.System, true)
	w.str("input_hash", row.InputHash, false)
	if len(row.Output) > 0 {
		w.name("output")
		// Compacted, as json.Marshal does, which also checks it is one
		// JSON value.
		buf := bytes.NewBuffer(w.b)
		if err := json.Compact(buf, row.Output); err != nil {
			return nil, false, err
		}
		w.b = buf.Bytes()
	}
	w.str("status", string(row.Status), false)
	w.str("idempotency_key", row.IdempotencyKey, false)
	w.num("attempts", row.Attempts, false)
	w.name("latency_ms")
	w.float(row.LatencyMS)
	if row.LimitWaitMS != 0 {
		w.name("limit_wait_ms")
		w.float(row.LimitWaitMS)
	}
	w.str("error", row.Error, true)
	w.str("error_class", row.ErrorClass, true)
	w.num("error_status", row.ErrorStatus, true)
	if row.Fingerprint != nil {
		w.raw("fingerprint", row.Fingerprint)
	}
	w.flag("verified", row.Verified)
	if u := row.Usage; u != nil {
		w.name("usage")
		w.b = append(w.b, '{')
		w.str("model", u.Model, true)
		w.int64("prompt_tokens", u.PromptTokens)
		w.int64("completion_tokens", u.CompletionTokens)
		w.b = append(w.b, '}')
	}
	w.flag("orphan", row.Orphan)
	w.flag("retention_rewrite", row.RetentionRewrite)
	if len(row.History) > 0 {
		w.raw("history", row.History)
	}
	w.str("trace_id", row.TraceID, true)
	w.time("started_at", row.StartedAt)
	if !row.FinishedAt.IsZero() {
		w.time("finished_at", row.FinishedAt)
	}
	// The row's own fields follow the embedded Call's, as json.Marshal
	// writes them.
	w.flag("retryable_after_compensation", row.RetryableAfterCompensation)
	w.num("history_dropped", row.HistoryDropped, true)
	return append(w.b, '}'), w.ok, nil
}

// rowWriter appends the fields of one JSON object; ok turns false at the
// first value it cannot write as json.Marshal would.
type rowWriter struct {
	b  []byte
	ok bool
}

// name starts a field: a comma unless it is the object's first.
func (w *rowWriter) name(n string) {
	if last := w.b[len(w.b)-1]; last != '{' {
		w.b = append(w.b, ',')
	}
	w.b = append(w.b, '"')
	w.b = append(w.b, n...)
	w.b = append(w.b, '"', ':')
}

func (w *rowWriter) str(n, s string, omitEmpty bool) {
	if omitEmpty && s == "" {
		return
	}
	w.name(n)
	var ok bool
	w.b, ok = appendPlainString(w.b, s)
	w.ok = w.ok && ok
}

func (w *rowWriter) num(n string, v int, omitEmpty bool) {
	if omitEmpty && v == 0 {
		return
	}
	w.int64(n, int64(v))
}

func (w *rowWriter) int64(n string, v int64) {
	w.name(n)
	w.b = strconv.AppendInt(w.b, v, 10)
}

func (w *rowWriter) flag(n string, v bool) {
	if v {
		w.name(n)
		w.b = append(w.b, "true"...)
	}
}

func (w *rowWriter) float(f float64) {
	var ok bool
	w.b, ok = appendFloat(w.b, f)
	w.ok = w.ok && ok
}

func (w *rowWriter) time(n string, t time.Time) {
	w.name(n)
	var ok bool
	w.b, ok = appendTime(w.b, t)
	w.ok = w.ok && ok
}

// raw writes v by json.Marshal: the rare nested values (a fingerprint,
// a history).
func (w *rowWriter) raw(n string, v any) {
	data, err := json.Marshal(v)
	if err != nil {
		w.ok = false
		return
	}
	w.name(n)
	w.b = append(w.b, data...)
}

// appendPlainString appends s quoted if no byte of it needs escaping
// (printable ASCII but for ", \, <, > and &, as json.Marshal escapes
// them), and reports whether it did.
func appendPlainString(b []byte, s string) ([]byte, bool) {
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c < 0x20 || c > 0x7e, c == '"', c == '\\', c == '<', c == '>', c == '&':
			return b, false
		}
	}
	b = append(b, '"')
	b = append(b, s...)
	return append(b, '"'), true
}

// appendFloat appends f as json.Marshal does for the values it writes in
// plain notation; it reports false for the others.
func appendFloat(b []byte, f float64) ([]byte, bool) {
	if a := math.Abs(f); a != 0 && (a < 1e-6 || a >= 1e21) || math.IsNaN(f) || math.IsInf(f, 0) {
		return b, false
	}
	return strconv.AppendFloat(b, f, 'f', -1, 64), true
}

// appendTime appends t as time.Time's MarshalJSON does (RFC 3339 with
// nanoseconds), for years 0-9999; it reports false for the others.
func appendTime(b []byte, t time.Time) ([]byte, bool) {
	if y := t.Year(); y < 0 || y > 9999 {
		return b, false
	}
	if _, off := t.Zone(); off%60 != 0 {
		// MarshalJSON refuses a zone offset with seconds.
		return b, false
	}
	b = append(b, '"')
	if t.Location() != time.UTC {
		b = t.AppendFormat(b, time.RFC3339Nano)
		return append(b, '"'), true
	}
	// Rows hold UTC times: the layout's digits, written directly.
	year, month, day := t.Date()
	hour, minute, sec := t.Clock()
	b = appendDigits(b, year, 4)
	b = append(b, '-')
	b = appendDigits(b, int(month), 2)
	b = append(b, '-')
	b = appendDigits(b, day, 2)
	b = append(b, 'T')
	b = appendDigits(b, hour, 2)
	b = append(b, ':')
	b = appendDigits(b, minute, 2)
	b = append(b, ':')
	b = appendDigits(b, sec, 2)
	if ns := t.Nanosecond(); ns != 0 {
		// Nanoseconds without trailing zeros, as RFC3339Nano's .999999999.
		n := len(b)
		b = append(b, '.')
		b = appendDigits(b, ns, 9)
		for b[len(b)-1] == '0' && len(b) > n+1 {
			b = b[:len(b)-1]
		}
	}
	return append(b, 'Z', '"'), true
}

// appendDigits appends n (0 <= n) zero-padded to width digits.
func appendDigits(b []byte, n, width int) []byte {
	var d [9]byte
	for i := width - 1; i >= 0; i-- {
		d[i] = byte('0' + n%10)
		n /= 10
	}
	return append(b, d[:width]...)
}
