package dashboard

import (
	"testing"

	"github.com/salvagehq/salvage"
)

// TestCallStatsCountEachWriteOnce: a restarted watch delivers rows again
// and they are not counted again; retention's rewrites, a compensation
// and an orphan's mark add no tokens; a row's later outcome is an event.
func TestCallStatsCountEachWriteOnce(t *testing.T) {
	c := newCallStats()
	usage := &salvage.Usage{Model: "m", PromptTokens: 100, CompletionTokens: 5}
	put := func(key string, rev uint64, call salvage.Call) {
		call.Key = key
		c.update(salvage.Change[salvage.Call]{Key: key, Revision: rev, Value: call})
	}
	ok := salvage.Call{Tool: "model", Status: salvage.CallSucceeded, Usage: usage, LatencyMS: 3}
	failed := salvage.Call{Tool: "charge", Status: salvage.CallFailed, LatencyMS: 2}
	// The first watch: two rows, caught up, then a live write.
	put("a", 1, ok)
	put("b", 2, failed)
	c.update(salvage.Change[salvage.Call]{CaughtUp: true})
	put("c", 3, ok)
	// The watch restarts: every key's latest row again, and one written
	// while it was down.
	put("a", 1, ok)
	put("b", 2, failed)
	put("c", 3, ok)
	put("d", 4, ok)
	c.update(salvage.Change[salvage.Call]{CaughtUp: true})
	// Retention gives a and c a TTL: the same outcomes.
	kept := ok
	kept.RetentionRewrite = true
	put("a", 5, kept)
	put("c", 6, kept)
	// b is replayed and succeeds: an event, and its spending.
	put("b", 7, salvage.Call{Tool: "charge", Status: salvage.CallSucceeded, Usage: usage})
	// d is compensated, then marked an orphan: events without spending.
	comp := ok
	comp.Status = salvage.CallCompensated
	put("d", 8, comp)
	orphan := ok
	orphan.Orphan = true
	put("d", 9, orphan)

	counts := c.counts()
	if got := counts["model"]; got[string(salvage.CallSucceeded)] != 4 || got[string(salvage.CallCompensated)] != 1 {
		t.Errorf("model calls = %v, want 4 SUCCEEDED (a, c, d, d's orphan mark) and 1 COMPENSATED", got)
	}
	if got := counts["charge"]; got[string(salvage.CallFailed)] != 1 || got[string(salvage.CallSucceeded)] != 1 {
		t.Errorf("charge calls = %v, want 1 FAILED and 1 SUCCEEDED", got)
	}
	if got := c.tokenCounts()["m"]; got["prompt"] != 400 || got["completion"] != 20 {
		t.Errorf("tokens = %v, want 400 prompt and 20 completion (a, c, d, b's replay)", got)
	}
}

// TestCallStatsCountWhatExistedAtTheStart: the rows that existed when the
// dashboard started count once each in their latest state, with their
// tokens, whatever came after the success (a retention rewrite, an
// orphan's mark): this process never saw the success itself.
func TestCallStatsCountWhatExistedAtTheStart(t *testing.T) {
	c := newCallStats()
	usage := &salvage.Usage{Model: "m", PromptTokens: 100, CompletionTokens: 5}
	rows := []salvage.Call{
		{Tool: "model", Status: salvage.CallSucceeded, Usage: usage, RetentionRewrite: true},
		{Tool: "model", Status: salvage.CallSucceeded, Usage: usage, Orphan: true},
		{Tool: "refund", Status: salvage.CallCompensated, Usage: usage},
	}
	for i, r := range rows {
		c.update(salvage.Change[salvage.Call]{Key: string(rune('a' + i)), Revision: uint64(10 + i), Value: r})
	}
	c.update(salvage.Change[salvage.Call]{CaughtUp: true})
	if got := c.counts(); got["model"][string(salvage.CallSucceeded)] != 2 || got["refund"][string(salvage.CallCompensated)] != 1 {
		t.Errorf("calls = %v, want 2 model SUCCEEDED and 1 refund COMPENSATED", got)
	}
	if got := c.tokenCounts()["m"]; got["prompt"] != 300 || got["completion"] != 15 {
		t.Errorf("tokens = %v, want 300 prompt and 15 completion", got)
	}
}
