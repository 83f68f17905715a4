package operator

import (
	"bytes"
	"strings"
	"testing"

	"github.com/salvagehq/salvage"
)

// A chunk held at a breaker and released (a new message, delivery 1),
// then taken over from a dead worker: "deliveries" in the trace's header
// is JetStream's count for its message, as status, trace --json and the
// dashboard say (it said 3: every take counted), and the takes are runs.
func TestTraceDeliveriesMeanOneThing(t *testing.T) {
	t.Parallel()
	var out bytes.Buffer
	e := &Env{Stdout: &out}
	e.printTrace(&salvage.Trace{Job: "J", Chunks: []salvage.TraceChunk{{Chunk: 1, Status: salvage.ChunkDone, Stage: 1, Deliveries: 1,
		Events: []salvage.ChunkEvent{{Kind: salvage.EventDelivered, Delivery: 1}, {Kind: salvage.EventHeld}, {Kind: salvage.EventDelivered, Delivery: 1},
			{Kind: salvage.EventDelivered, Delivery: 1, Worker: "survivor"}, {Kind: salvage.EventDone}}}}})
	header := strings.SplitN(out.String(), "\n", 3)[1]
	if !strings.Contains(header, "deliveries 1 ") || !strings.Contains(header, "runs 3") {
		t.Fatalf("header %q; want deliveries 1 and runs 3", header)
	}
}
