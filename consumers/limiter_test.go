package consumers

import (
	"testing"
	"time"

	"github.com/salvagehq/salvage/kv"
)

// TestAllotNeverPassesTheLimit: however the shares stand, what a process
// takes leaves the sum within the limit; processes that all want more
// converge on equal parts within two renewals each; a process that wants
// no more does not grow; an expired share is free.
func TestAllotNeverPassesTheLimit(t *testing.T) {
	now := time.Now()
	spec := kv.Limit{Key: "system.p", RequestsPerMinute: 600, TokensPerMinute: 200_000, InFlight: 10}
	sh := &kv.LimitShares{Shares: map[string]kv.LimitShare{}}
	sum := func() (rpm, tpm float64, in int) {
		for _, s := range sh.Shares {
			if now.Before(s.Expires) {
				rpm, tpm, in = rpm+s.RequestsPerMinute, tpm+s.TokensPerMinute, in+s.InFlight
			}
		}
		return rpm, tpm, in
	}
	procs := []string{"a", "b", "c", "d"}
	for round := range 3 {
		for _, p := range procs {
			sh.Shares[p] = allot(spec, sh, p, true, now)
			if rpm, tpm, in := sum(); rpm > 600+1e-9 || tpm > 200_000+1e-6 || in > 10 {
				t.Fatalf("round %d, %s: shares add up to %.2f rpm, %.2f tpm, %d in flight: past the limit", round, p, rpm, tpm, in)
			}
		}
	}
	for _, p := range procs {
		if s := sh.Shares[p]; s.RequestsPerMinute < 149.99 || s.RequestsPerMinute > 150.01 || s.InFlight != 2 {
			t.Errorf("%s after three rounds: %+v; want a quarter of the requests (150) and 2 in flight", p, s)
		}
	}
	// d wants no more: it keeps what it has, and does not grow when the
	// others go.
	before := sh.Shares["d"]
	delete(sh.Shares, "a")
	sh.Shares["d"] = allot(spec, sh, "d", false, now)
	if got := sh.Shares["d"].RequestsPerMinute; got > before.RequestsPerMinute+1e-9 {
		t.Errorf("d, wanting no more, grew from %.1f to %.1f", before.RequestsPerMinute, got)
	}
	// b's lease lapsed (a process died): c takes what it leaves.
	sh.Shares["b"] = kv.LimitShare{RequestsPerMinute: 150, Expires: now.Add(-time.Millisecond)}
	sh.Shares["c"] = allot(spec, sh, "c", true, now)
	if got := sh.Shares["c"].RequestsPerMinute; got < 600-150-1e-9 {
		t.Errorf("c after a and b left: %.1f requests a minute; want all but d's 150", got)
	}
	if rpm, _, _ := sum(); rpm > 600+1e-9 {
		t.Errorf("shares add up to %.1f: past the limit", rpm)
	}
}
