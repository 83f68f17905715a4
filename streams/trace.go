package streams

import (
	"crypto/sha256"
	"encoding/hex"
	"regexp"
)

var traceparentRE = regexp.MustCompile(`^00-([0-9a-f]{32})-([0-9a-f]{16})-[0-9a-f]{2}$`)

// TraceParent builds a W3C traceparent for a trace id and a span id.
func TraceParent(traceID, spanID string) string { return "00-" + traceID + "-" + spanID + "-01" }

// ParseTraceParent returns the trace id of a valid W3C traceparent.
func ParseTraceParent(tp string) (string, bool) {
	m := traceparentRE.FindStringSubmatch(tp)
	if m == nil || m[1] == "00000000000000000000000000000000" {
		return "", false
	}
	return m[1], true
}

// DeriveTraceID mints a trace id that is the same every time for seed, so a
// redelivered job keeps its trace.
func DeriveTraceID(seed string) string {
	h := sha256.Sum256([]byte("trace:" + seed))
	return hex.EncodeToString(h[:16])
}

// DeriveSpanID mints a span id that is stable for seed.
func DeriveSpanID(seed string) string {
	h := sha256.Sum256([]byte("span:" + seed))
	return hex.EncodeToString(h[:8])
}
