package streams

import (
	"crypto/sha256"
	"encoding/hex"
	"time"
	"unicode/utf8"

	"github.com/salvagehq/salvage/salvagetype"
)

// Bounds of what one event carries.
const ()

// NewRejection describes refused data, bounded (see Rejection).
func NewRejection(reason salvagetype.RejectReason, err error, subject string, seq uint64, data []byte) salvagetype.Rejection {
	sum := sha256.Sum256(data)
	r := salvagetype.Rejection{
		Reason: reason, Error: Clip(err.Error(), salvagetype.ErrorTextMax), Subject: Clip(subject, 1024), StreamSeq: seq,
		Size: len(data), SHA256: hex.EncodeToString(sum[:]), At: time.Now().UTC(),
	}
	r.Data = Clip(string(data), salvagetype.RejectionDataMax)
	r.DataTruncated = len(r.Data) < len(data)
	return r
}

// Clip cuts s to at most n bytes without splitting a UTF-8 character.
func Clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

// Advisory is the part of a JetStream consumer advisory Salvage reads.
type Advisory struct {
	Type       string `json:"type"`
	Stream     string `json:"stream"`
	Consumer   string `json:"consumer"`
	StreamSeq  uint64 `json:"stream_seq"`
	Deliveries uint64 `json:"deliveries"`
	Reason     string `json:"reason,omitempty"`
}
