package flow

import (
	"fmt"
	"testing"
	"time"

	"github.com/salvagehq/salvage/kv"
	"github.com/salvagehq/salvage/recovery"
	"github.com/salvagehq/salvage/salvagetype"
)

// TestEnvelopeListsAreBounded: a chunk of 2,500 calls, 1,200 of them
// reversible effects and 1,100 unknown, gets envelope lists of at most
// salvagetype.EnvelopeEntriesMax keys each — the newest, pending
// compensations newest first — and a count of the rest; the lists
// recovery compensates from stay whole.
func TestEnvelopeListsAreBounded(t *testing.T) {
	t.Parallel()
	rows := map[string]kv.StoredRow{}
	t0 := time.Now()
	for i := range 2500 {
		r := kv.JournalRow{Call: salvagetype.Call{Key: fmt.Sprintf("J.1.0.1.a.%d", i), Seq: i, Stage: 1, Agent: "a", Status: salvagetype.CallSucceeded, StartedAt: t0.Add(time.Duration(i) * time.Millisecond)}}
		switch {
		case i < 1200:
			r.Fingerprint = &salvagetype.Fingerprint{System: "s", Reversible: true}
		case i < 1400:
			r.Status = salvagetype.CallFailed
		default:
			r.Status = salvagetype.CallUnknown
		}
		rows[r.Key] = kv.StoredRow{JournalRow: r}
	}
	completed, inFlight, pending, _ := recovery.Rows(rows).Entries()
	if len(completed) != 1200 || len(inFlight) != 1100 || len(pending) != 1200 {
		t.Fatalf("whole lists: %d completed, %d in flight, %d pending; want 1200, 1100, 1200", len(completed), len(inFlight), len(pending))
	}
	if pending[0] != "J.1.0.1.a.1199" || pending[1199] != "J.1.0.1.a.0" {
		t.Fatalf("pending compensations run %s … %s; want newest first", pending[0], pending[1199])
	}
	c, i, p, dropped := envelopeEntries(completed, inFlight, pending)
	limit := salvagetype.EnvelopeEntriesMax
	if len(c) != limit || len(i) != limit || len(p) != limit || dropped != 200+100+200 {
		t.Fatalf("bounded lists: %d, %d, %d, %d dropped; want %d each, 500 dropped", len(c), len(i), len(p), dropped, limit)
	}
	if c[limit-1] != "J.1.0.1.a.1199" || c[0] != "J.1.0.1.a.200" || p[0] != "J.1.0.1.a.1199" || i[limit-1] != "J.1.0.1.a.2499" {
		t.Fatalf("kept %s…%s completed, %s… pending, …%s in flight; want the newest of each", c[0], c[limit-1], p[0], i[limit-1])
	}
	if c, _, _, dropped := envelopeEntries(completed[:10], nil, nil); len(c) != 10 || dropped != 0 {
		t.Fatalf("a short list was cut: %d kept, %d dropped", len(c), dropped)
	}
}
