package streams

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
)

// InputHash names what a job id stands for: the pipeline and the input,
// the input in a canonical form (object keys sorted, no insignificant
// space, numbers as written), so the same input sent by the Go client, a
// service or a plain `nats pub` hashes the same. A job id names one input:
// a second submission under an existing id is the same job when its hash
// matches, and refused when it does not.
func InputHash(pipeline string, input json.RawMessage) string {
	h := sha256.New()
	h.Write([]byte(pipeline))
	h.Write([]byte{0})
	h.Write(canonicalJSON(input))
	return hex.EncodeToString(h.Sum(nil))
}

// canonicalJSON re-encodes data with sorted keys; data that is not JSON is
// hashed as it is.
func canonicalJSON(data json.RawMessage) []byte {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return data
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return data
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n"))
}
