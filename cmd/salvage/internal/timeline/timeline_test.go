package timeline_test

import (
	"strings"
	"testing"
	"time"

	"github.com/salvagehq/salvage"
	"github.com/salvagehq/salvage/cmd/salvage/internal/timeline"
)

// TestTimelineExplainsTheGaps builds the chunk the issue could not read:
// killed mid-call, held by a breaker, verified on resume, failed later,
// compensated and dead-lettered; the timeline puts it all in time order
// and says what each gap was.
func TestTimelineExplainsTheGaps(t *testing.T) {
	t0 := time.Date(2026, 12, 3, 3, 0, 0, 0, time.UTC)
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	c := salvage.TraceChunk{Chunk: 117, Epoch: 0,
		Events: []salvage.ChunkEvent{
			{Kind: salvage.EventDelivered, At: at(0), Delivery: 1, Worker: "w-1", Stage: 1},
			{Kind: salvage.EventDelivered, At: at(10.9), Delivery: 2, Worker: "w-2", Stage: 2},
			{Kind: salvage.EventHeld, At: at(11), Stage: 3, Detail: "email"},
			{Kind: salvage.EventDelivered, At: at(28.6), Delivery: 2, Worker: "w-2", Stage: 3},
			{Kind: salvage.EventCompensated, At: at(30), Stage: 2, Detail: "refund-payment undid charge-payment ch_1"},
			{Kind: salvage.EventDeadLettered, At: at(30.5), Delivery: 2, Detail: "01JENV"},
		},
		Calls: []salvage.Call{
			{Stage: 1, Agent: "stock", Tool: "reserve-inventory", Status: salvage.CallSucceeded, StartedAt: at(0.1), Attempts: 1},
			{Stage: 2, Agent: "billing", Tool: "charge-payment", System: "payments", Status: salvage.CallCompensated, Verified: true, StartedAt: at(10.95),
				History: []salvage.CallAttempt{{Status: salvage.CallInitiated, StartedAt: at(0.2)}}},
			{Stage: 3, Agent: "notify", Tool: "send-email", System: "email", Status: salvage.CallFailed, Error: "422 bad address", StartedAt: at(28.7), Attempts: 1},
		},
	}
	got := timeline.Of(c)
	var kinds []string
	for _, e := range got {
		kinds = append(kinds, e.Kind)
	}
	want := "delivered call earlier-run delivered call held delivered call compensated dead-lettered"
	if strings.Join(kinds, " ") != want {
		t.Fatalf("order %q, want %q", strings.Join(kinds, " "), want)
	}
	texts := map[int]string{
		2: "earlier run of charge-payment began and never finished: its worker stopped mid-call",
		3: "redelivered 10.9s after delivery 1 (w-1) ended without a result: that worker was killed",
		4: "verified: payments said an earlier attempt had taken effect",
		5: "held at stage 3: the email breaker is open",
		6: "released 17.6s after the hold, when the email breaker let calls through",
		7: "422 bad address",
		8: "compensated: refund-payment undid charge-payment ch_1",
		9: "dead-lettered after 2 deliveries: envelope 01JENV",
	}
	for i, s := range texts {
		if !strings.Contains(got[i].Text, s) {
			t.Errorf("entry %d (%s): %q, want it to say %q", i, got[i].Kind, got[i].Text, s)
		}
	}
	for i, failed := range []bool{false, false, true, false, false, false, false, true, false, true} {
		if got[i].Failed != failed {
			t.Errorf("entry %d (%s) failed = %v, want %v", i, got[i].Kind, got[i].Failed, failed)
		}
	}
	if got[9].Offset != 30.5 || got[0].Offset != 0 {
		t.Errorf("offsets %v .. %v, want 0 .. 30.5", got[0].Offset, got[9].Offset)
	}
}

// TestTimelineExplainsATakeover: the same delivery taken by a second
// worker is a takeover after the first one's lease lapsed, not a
// redelivery.
func TestTimelineExplainsATakeover(t *testing.T) {
	t0 := time.Date(2026, 12, 3, 3, 0, 0, 0, time.UTC)
	got := timeline.Of(salvage.TraceChunk{Chunk: 1, Events: []salvage.ChunkEvent{
		{Kind: salvage.EventDelivered, At: t0, Delivery: 1, Worker: "w-1", Stage: 1},
		{Kind: salvage.EventDelivered, At: t0.Add(4200 * time.Millisecond), Delivery: 1, Worker: "w-2", Stage: 2},
	}})
	if len(got) != 2 || !strings.Contains(got[1].Text, "delivery 1 taken over by w-2 at stage 2 — 4.2s after w-1 took it") ||
		!strings.Contains(got[1].Text, "lease lapsed") || strings.Contains(got[1].Text, "redelivered") {
		t.Errorf("timeline = %+v; want the second entry to say w-2 took delivery 1 over once w-1's lease lapsed", got)
	}
}

// TestReapersTakeoverIsNotCalledAckWait: a delivery the reaper handed back
// (its delivered event says "taken over from …") is explained as the
// reaper's takeover, not as AckWait's redelivery.
func TestReapersTakeoverIsNotCalledAckWait(t *testing.T) {
	at := time.Date(2026, 12, 6, 0, 0, 0, 0, time.UTC)
	entries := timeline.Of(salvage.TraceChunk{Chunk: 1, Events: []salvage.ChunkEvent{
		{Kind: salvage.EventDelivered, Delivery: 1, Worker: "w-1", Stage: 2, At: at},
		{Kind: salvage.EventDelivered, Delivery: 2, Worker: "w-2", Stage: 2, At: at.Add(4 * time.Second),
			Detail: "taken over from w-1 (its process's lease lapsed)"},
	}})
	if len(entries) != 2 {
		t.Fatalf("timeline = %+v; want two entries", entries)
	}
	got := entries[1].Text
	if !strings.Contains(got, "delivery 2 taken over by w-2") || !strings.Contains(got, "lease lapsed") || strings.Contains(got, "AckWait passed") {
		t.Errorf("text = %q; want the reaper's takeover, not AckWait's redelivery", got)
	}
}
