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
	ok := true
	str := func(name, s string, omitEmpty bool) {
		if omitEmpty && s == "" {
			return
		}
		b = append(b, ',', '"')
		b = append(b, name...)
		b = append(b, '"', ':')
		var sok bool
		b, sok = appendPlainString(b, s)
		ok = ok && sok
	}
	num := func(name string, n int, omitEmpty bool) {
		if omitEmpty && n == 0 {
			return
		}
		b = append(b, ',', '"')
		b = append(b, name...)
		b = append(b, '"', ':')
		b = strconv.AppendInt(b, int64(n), 10)
	}
	flag := func(name string, v bool) {
		if v {
			b = append(b, ',', '"')
			b = append(b, name...)
			b = append(b, `":true`...)
		}
	}
	raw := func(name string, v any) {
		data, err := json.Marshal(v)
		if err != nil {
			ok = false
			return
		}
		b = append(b, ',', '"')
		b = append(b, name...)
		b = append(b, '"', ':')
		b = append(b, data...)
	}
	b = append(b, `{"key":`...)
	var sok bool
	b, sok = appendPlainString(b, row.Key)
	ok = ok && sok
	str("job_id", row.Job, false)
	num("chunk", row.Chunk, false)
	num("epoch", row.Epoch, false)
	num("stage", row.Stage, false)
	str("agent", row.Agent, false)
	num("seq", row.Seq, false)
	str("tool", row.Tool, false)
	str("system", row.System, true)
	str("input_hash", row.InputHash, false)
	if len(row.Output) > 0 {
		b = append(b, `,"output":`...)
		// Compacted, as json.Marshal does, which also checks it is one
		// JSON value.
		buf := bytes.NewBuffer(b)
		if err := json.Compact(buf, row.Output); err != nil {
			return nil, false, err
		}
		b = buf.Bytes()
	}
	str("status", row.Status, false)
	if row.Fingerprint != nil {
		raw("fingerprint", row.Fingerprint)
	}
	str("idempotency_key", row.IdempotencyKey, false)
	num("attempts", row.Attempts, false)
	b = append(b, `,"latency_ms":`...)
	var fok bool
	b, fok = appendFloat(b, row.LatencyMS)
	ok = ok && fok
	str("error", row.Error, true)
	str("error_class", row.ErrorClass, true)
	num("error_status", row.ErrorStatus, true)
	flag("retryable_after_compensation", row.RetryableAfterCompensation)
	flag("verified", row.Verified)
	if u := row.Usage; u != nil {
		b = append(b, `,"usage":{`...)
		if u.Model != "" {
			b = append(b, `"model":`...)
			b, sok = appendPlainString(b, u.Model)
			ok = ok && sok
			b = append(b, ',')
		}
		b = append(b, `"prompt_tokens":`...)
		b = strconv.AppendInt(b, u.PromptTokens, 10)
		b = append(b, `,"completion_tokens":`...)
		b = strconv.AppendInt(b, u.CompletionTokens, 10)
		b = append(b, '}')
	}
	flag("orphan", row.Orphan)
	str("trace_id", row.TraceID, true)
	b = append(b, `,"started_at":`...)
	var tok bool
	b, tok = appendTime(b, row.StartedAt)
	ok = ok && tok
	if !row.FinishedAt.IsZero() {
		b = append(b, `,"finished_at":`...)
		b, tok = appendTime(b, row.FinishedAt)
		ok = ok && tok
	}
	if len(row.History) > 0 {
		raw("history", row.History)
	}
	num("history_dropped", row.HistoryDropped, true)
	flag("retention_rewrite", row.RetentionRewrite)
	return append(b, '}'), ok, nil
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
