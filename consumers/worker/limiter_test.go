package worker

import (
	"errors"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/salvagehq/salvage/kv"
	"github.com/salvagehq/salvage/recovery"
	"github.com/salvagehq/salvage/salvagetype"
)

// TestAllotNeverPassesTheLimit: however the shares stand, what a process
// takes leaves the sum within the limit; processes that all want more
// converge on equal parts within two renewals each; a process that wants
// no more does not grow; an expired share is free.
func TestAllotNeverPassesTheLimit(t *testing.T) {
	now := time.Now()
	spec := salvagetype.Limit{Key: "tenant.p", RequestsPerMinute: 600, TokensPerMinute: 200_000, InFlight: 10, Chunks: 9}
	sh := &kv.LimitShares{Shares: map[string]kv.LimitShare{}}
	sum := func() (rpm, tpm float64, in int) {
		chunks := 0
		for _, s := range sh.Shares {
			if now.Before(s.Expires) {
				rpm, tpm, in = rpm+s.RequestsPerMinute, tpm+s.TokensPerMinute, in+s.InFlight
				chunks += s.Chunks
			}
		}
		if chunks > spec.Chunks {
			t.Fatalf("shares hold %d chunks in flight; the limit is %d", chunks, spec.Chunks)
		}
		return rpm, tpm, in
	}
	procs := []string{"a", "b", "c", "d"}
	for round := range 3 {
		for _, p := range procs {
			sh.Shares[p], _ = allot(spec, sh, p, true, now, kv.LimitShare{})
			if rpm, tpm, in := sum(); rpm > 600+1e-9 || tpm > 200_000+1e-6 || in > 10 {
				t.Fatalf("round %d, %s: shares add up to %.2f rpm, %.2f tpm, %d in flight: past the limit", round, p, rpm, tpm, in)
			}
		}
	}
	inFlight, chunks := 0, 0
	for _, p := range procs {
		s := sh.Shares[p]
		if s.RequestsPerMinute < 149.99 || s.RequestsPerMinute > 150.01 || s.InFlight < 2 || s.InFlight > 3 || s.Chunks < 2 || s.Chunks > 3 {
			t.Errorf("%s after three rounds: %+v; want a quarter of the requests (150), and of the calls and chunks in flight (2 or 3)", p, s)
		}
		inFlight, chunks = inFlight+s.InFlight, chunks+s.Chunks
	}
	// Counts split with their remainder: the whole limit is held.
	if inFlight != 10 || chunks != 9 {
		t.Errorf("after three rounds the shares hold %d in flight and %d chunks; want all 10 and 9", inFlight, chunks)
	}
	// d wants no more: it keeps what it has, and does not grow when the
	// others go.
	before := sh.Shares["d"]
	delete(sh.Shares, "a")
	sh.Shares["d"], _ = allot(spec, sh, "d", false, now, kv.LimitShare{})
	if got := sh.Shares["d"].RequestsPerMinute; got > before.RequestsPerMinute+1e-9 {
		t.Errorf("d, wanting no more, grew from %.1f to %.1f", before.RequestsPerMinute, got)
	}
	// b's lease lapsed (a process died): c takes what it leaves.
	sh.Shares["b"] = kv.LimitShare{RequestsPerMinute: 150, Expires: now.Add(-time.Millisecond)}
	sh.Shares["c"], _ = allot(spec, sh, "c", true, now, kv.LimitShare{})
	if got := sh.Shares["c"].RequestsPerMinute; got < 600-150-1e-9 {
		t.Errorf("c after a and b left: %.1f requests a minute; want all but d's 150", got)
	}
	if rpm, _, _ := sum(); rpm > 600+1e-9 {
		t.Errorf("shares add up to %.1f: past the limit", rpm)
	}
}

// TestLimiterHoldsAKeyForWhatItIsTold: a request whose answer says the
// provider's budget is spent for a while (Spent.Wait), or a 429 naming a
// wait, holds the key for that long; one that says nothing holds nothing.
func TestLimiterHoldsAKeyForWhatItIsTold(t *testing.T) {
	now := time.Now()
	l := &limiter{now: func() time.Time { return now }, changed: make(chan struct{}), wake: make(chan struct{}, 1)}
	k := &limitKey{spec: salvagetype.Limit{Key: "system.p", RequestsPerMinute: 600},
		share: kv.LimitShare{RequestsPerMinute: 600, Expires: now.Add(time.Hour)}, requests: 1, refilled: now, holders: 1}
	keys := []*limitKey{k}
	k.take(now, 0)
	l.done(keys, 0, recovery.Spent{}, nil)
	if !k.pausedUntil.IsZero() {
		t.Fatalf("an answer that said nothing paused the key until %s", k.pausedUntil)
	}
	k.take(now, 0)
	l.done(keys, 0, recovery.Spent{Wait: 40 * time.Second}, nil)
	if got := k.pausedUntil.Sub(now); got != 40*time.Second || !k.tell {
		t.Fatalf("paused for %s (tell the others: %v); want 40s, told", got, k.tell)
	}
	if w, _ := k.waitFor(now.Add(39*time.Second), 0); w != time.Second {
		t.Errorf("a request 39 s in waits %s; want the last second", w)
	}
	k.take(now, 0)
	l.done(keys, 0, recovery.Spent{}, salvagetype.RateLimited(90*time.Second, errors.New("429")))
	if got := k.pausedUntil.Sub(now); got != 90*time.Second {
		t.Errorf("after a 429 asking 90 s: paused for %s", got)
	}
	if k.inFlight != 0 {
		t.Errorf("in flight %d after three requests settled", k.inFlight)
	}
}

// TestAShrinkingShareKeepsWhatIsInUse: a process running 3 chunks of a
// tenant capped at 3 keeps a share of 3 on its record while they run,
// though its fair part falls to 2 once another process wants some; the
// other gets nothing until the first's chunks end, so the two never hold
// more than the cap together; as they end, the shares converge on 2 and
// 1 (the remainder to the first id).
func TestAShrinkingShareKeepsWhatIsInUse(t *testing.T) {
	now := time.Now()
	spec := salvagetype.Limit{Key: "tenant.a", Chunks: 3}
	sh := &kv.LimitShares{Shares: map[string]kv.LimitShare{}}
	sum := func() int {
		n := 0
		for _, s := range sh.Shares {
			n += s.Chunks
		}
		return n
	}
	var fair kv.LimitShare
	sh.Shares["p1"], fair = allot(spec, sh, "p1", true, now, kv.LimitShare{})
	if fair.Chunks != 3 {
		t.Fatalf("p1 alone: fair part %d; want 3", fair.Chunks)
	}
	// p1 runs 3; p2 comes, wanting.
	sh.Shares["p2"], fair = allot(spec, sh, "p2", true, now, kv.LimitShare{})
	if fair.Chunks != 0 || sum() > 3 {
		t.Fatalf("p2 while p1 runs 3: fair %d, shares add up to %d", fair.Chunks, sum())
	}
	sh.Shares["p1"], fair = allot(spec, sh, "p1", true, now, kv.LimitShare{Chunks: 3})
	if fair.Chunks != 2 || sh.Shares["p1"].Chunks != 3 || sum() > 3 {
		t.Fatalf("p1 renewing with 3 running: fair %d, recorded %d, sum %d; want 2, 3, at most 3", fair.Chunks, sh.Shares["p1"].Chunks, sum())
	}
	sh.Shares["p2"], fair = allot(spec, sh, "p2", true, now, kv.LimitShare{})
	if fair.Chunks != 0 || sum() > 3 {
		t.Fatalf("p2 while p1 still runs 3: fair %d, sum %d", fair.Chunks, sum())
	}
	// One of p1's chunks ends; it starts none (its fair part is 2).
	sh.Shares["p1"], _ = allot(spec, sh, "p1", true, now, kv.LimitShare{Chunks: 2})
	sh.Shares["p2"], fair = allot(spec, sh, "p2", true, now, kv.LimitShare{})
	if fair.Chunks != 1 || sum() > 3 {
		t.Fatalf("p2 once p1 runs 1: fair %d, sum %d; want 1, at most 3", fair.Chunks, sum())
	}
}

// TestSharesNeverPassTheCapInAnyOrder: four processes renew in random
// order, wanting or not, each running a random number of chunks up to
// its fair part (all it may start); however the renewals fall, the shares
// on the record never add up past the cap, and what runs never passes
// it.
func TestSharesNeverPassTheCapInAnyOrder(t *testing.T) {
	now := time.Now()
	r := rand.New(rand.NewPCG(36, 7))
	for round := range 200 {
		spec := salvagetype.Limit{Key: "tenant.t", Chunks: 1 + r.IntN(12), InFlight: 1 + r.IntN(12)}
		sh := &kv.LimitShares{Shares: map[string]kv.LimitShare{}}
		fair := map[string]kv.LimitShare{}
		running := map[string]kv.LimitShare{}
		for step := range 60 {
			p := []string{"a", "b", "c", "d"}[r.IntN(4)]
			// Since its last renewal some of what it ran ended, and it
			// started more only up to its fair part.
			prev := running[p]
			run := kv.LimitShare{Chunks: r.IntN(max(prev.Chunks, fair[p].Chunks) + 1), InFlight: r.IntN(max(prev.InFlight, fair[p].InFlight) + 1)}
			running[p] = run
			sh.Shares[p], fair[p] = allot(spec, sh, p, r.IntN(3) > 0, now, run)
			var held, used kv.LimitShare
			for id, s := range sh.Shares {
				held.Chunks, held.InFlight = held.Chunks+s.Chunks, held.InFlight+s.InFlight
				used.Chunks, used.InFlight = used.Chunks+running[id].Chunks, used.InFlight+running[id].InFlight
			}
			if held.Chunks > spec.Chunks || held.InFlight > spec.InFlight || used.Chunks > spec.Chunks || used.InFlight > spec.InFlight {
				t.Fatalf("round %d step %d (%s renewed): held %+v, running %+v; the caps are %d chunks, %d in flight", round, step, p, held, used, spec.Chunks, spec.InFlight)
			}
		}
	}
}
