package salvage

import (
	"errors"
	"testing"

	"github.com/salvagehq/salvage/salvagetype"
)

// FuzzEnvelopeRequest: the body of a replay, resolve, ack or show request
// is refused as malformed or as a bad token, or names an envelope by a
// valid token (who acts is the request's: its by, else the server's
// stamp, else the service).
func FuzzEnvelopeRequest(f *testing.F) {
	for _, s := range []string{`{"envelope_id": "01JENVELOPE000000000000000"}`, `{"envelope_id": "a.b"}`, `{"envelope_id": ""}`,
		`{}`, `null`, `[]`, `{"envelope_id": 7}`, `{"envelope_id": "x", "by": "ann", "note": "n"}`, `not json`, `{"envelope_id": "*"}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		r, err := parseEnvelopeRequest(data)
		if err != nil {
			if !errors.Is(err, errMalformed) && !errors.Is(err, salvagetype.ErrInvalidToken) && !errors.Is(err, errTooLarge) {
				t.Fatalf("%q refused with %v", data, err)
			}
			return
		}
		if salvagetype.ValidateToken("envelope_id", r.EnvelopeID) != nil {
			t.Fatalf("%q accepted as %+v", data, r)
		}
	})
}
