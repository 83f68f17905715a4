package worker

import (
	"math"
	"testing"
	"time"

	"github.com/salvagehq/salvage/salvagetype"
)

// TestRampReleasesAtItsRate: after a breaker closes, a holder asking for
// its budget every tick (however often) releases one chunk at once, then
// what the rate ReleaseRampStart·2^(t/ReleaseRampDouble) accrues — never more than the
// integral of the rate plus one tick's worth, never a tick's worth less —
// and, from rampEnd on, whole batches. The clock is the test's: no real
// time passes.
func TestRampReleasesAtItsRate(t *testing.T) {
	t.Parallel()
	// integral is how many chunks the rate accrues over [0, d].
	integral := func(d time.Duration) float64 {
		k := float64(salvagetype.ReleaseRampDouble) / float64(time.Second) / math.Ln2
		return salvagetype.ReleaseRampStart * k * (math.Exp2(float64(d)/float64(salvagetype.ReleaseRampDouble)) - 1)
	}
	from := time.Unix(1_700_000_000, 0)
	for _, tick := range []time.Duration{10 * time.Millisecond, 100 * time.Millisecond, time.Second} {
		r := &ramp{from: from}
		released := 0
		for at := time.Duration(0); at < rampEnd; at += tick {
			n, ramping := r.budget(from.Add(at))
			if !ramping {
				t.Fatalf("tick %s: the ramp ended at %s; want %s", tick, at, rampEnd)
			}
			if at == 0 && n != 1 {
				t.Fatalf("tick %s: %d chunks at the close; want 1", tick, n)
			}
			// The holder releases all it may (there is always more held).
			r.allowance -= float64(n)
			released += n
			slack := rampRate(at)*tick.Seconds() + 1
			if want := 1 + integral(at); math.Abs(float64(released)-want) > slack {
				t.Fatalf("tick %s: %d released by %s; want %.1f ± %.1f", tick, released, at, want, slack)
			}
		}
		if n, ramping := r.budget(from.Add(rampEnd)); ramping || n != releaseBatch*releaseBatches {
			t.Fatalf("tick %s: at the ramp's end %d (ramping %v); want %d, unlimited", tick, n, ramping, releaseBatch*releaseBatches)
		}
	}
	// A holder that looked away for long is not handed the missed
	// allowance at once: at most one second's rate.
	r := &ramp{from: from}
	r.budget(from)
	r.allowance--
	at := 8 * time.Second
	if n, _ := r.budget(from.Add(at)); float64(n) > rampRate(at) {
		t.Fatalf("after 8 s unasked: %d chunks at once; want at most one second's rate (%.1f)", n, rampRate(at))
	}
}
