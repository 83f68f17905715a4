package worker

import (
	"math/rand/v2"
	"time"

	"github.com/salvagehq/salvage/kv"
	"github.com/salvagehq/salvage/salvagetype"
)

// allot is what process me takes of spec at now, given the unexpired
// shares sh holds: per bound, its fair part — an equal part of what the
// processes that do not want more leave, when it wants more; at most an
// equal part and no more than it holds, when it does not — within what
// the others' shares leave free. It returns the share to record, whose
// calls and chunks in flight are at least what the process has open
// (used), and the fair part, up to which it may open more.
func allot(spec salvagetype.Limit, sh *kv.LimitShares, me string, wants bool, now time.Time, used kv.LimitShare) (record, fair kv.LimitShare) {
	held := sh.Shares[me]
	// rank is how many wanting processes sort before me: a count's
	// remainder goes to the first of them, so that equal parts of 3
	// between 2 are 2 and 1, not 1 and 1.
	var othersN, wantingN, rank int
	var others, othersIdle kv.LimitShare
	for id, s := range sh.Shares {
		if id == me || !now.Before(s.Expires) {
			continue
		}
		othersN++
		others.RequestsPerMinute += s.RequestsPerMinute
		others.TokensPerMinute += s.TokensPerMinute
		others.InFlight += s.InFlight
		others.Chunks += s.Chunks
		if s.Wants {
			wantingN++
			if id < me {
				rank++
			}
		} else {
			othersIdle.RequestsPerMinute += s.RequestsPerMinute
			othersIdle.TokensPerMinute += s.TokensPerMinute
			othersIdle.InFlight += s.InFlight
			othersIdle.Chunks += s.Chunks
		}
	}
	n := float64(othersN + 1)
	part := func(limit, heldNow, othersSum, idleSum float64) float64 {
		if limit <= 0 {
			return 0
		}
		target := limit / n
		if wants {
			target = (limit - idleSum) / float64(wantingN+1)
		} else if heldNow > 0 {
			target = min(target, heldNow)
		}
		return max(0, min(target, limit-othersSum))
	}
	// count is part for a bound counted in whole calls or chunks.
	count := func(limit, heldNow, othersSum, idleSum int) int {
		if limit <= 0 {
			return 0
		}
		if !wants {
			return int(part(float64(limit), float64(heldNow), float64(othersSum), float64(idleSum)))
		}
		free, k := limit-idleSum, wantingN+1
		target := free / k
		if rank < free%k {
			target++
		}
		return max(0, min(target, limit-othersSum))
	}
	out := kv.LimitShare{
		RequestsPerMinute: part(float64(spec.RequestsPerMinute), held.RequestsPerMinute, others.RequestsPerMinute, othersIdle.RequestsPerMinute),
		TokensPerMinute:   part(float64(spec.TokensPerMinute), held.TokensPerMinute, others.TokensPerMinute, othersIdle.TokensPerMinute),
		InFlight:          count(spec.InFlight, held.InFlight, others.InFlight, othersIdle.InFlight),
		Chunks:            count(spec.Chunks, held.Chunks, others.Chunks, othersIdle.Chunks),
		Wants:             wants,
		// A little jitter keeps the fleet's renewals from lining up.
		Expires: now.Add(limitLease - time.Duration(rand.N(int64(limitLease/10)))),
	}
	if spec.InFlight > 0 && wants && out.InFlight == 0 && spec.InFlight-others.InFlight >= 1 {
		out.InFlight = 1
	}
	if spec.Chunks > 0 && wants && out.Chunks == 0 && spec.Chunks-others.Chunks >= 1 {
		out.Chunks = 1
	}
	record = out
	record.InFlight, record.Chunks = max(out.InFlight, used.InFlight), max(out.Chunks, used.Chunks)
	return record, out
}
