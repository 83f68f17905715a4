package recovery

import (
	"github.com/salvagehq/salvage/kv"
	"github.com/salvagehq/salvage/salvagetype"
)

// AutoRecoveryRate computes the automatic recovery rate per chunk, from
// envelope records: of the chunks that were dead-lettered, the share that
// then finished, or was compensated with nothing left standing, without a
// person (no replay, no resolve by hand, no cancelled job). Dead ends,
// escalations and chunks still recovering count against it; a chunk
// dead-lettered several times (its older envelopes superseded) counts
// once, by its latest envelope. The envelope that settles a cancelled
// chunk's effects, and that of a chunk whose approval a person rejected,
// is not a failure: it counts only as a person's doing on a chunk that
// failed before.
func AutoRecoveryRate(recs []kv.EnvelopeRecord) salvagetype.RecoveryStats {
	type chunkKey struct {
		job   string
		chunk int
	}
	type chunkFate struct {
		latest kv.EnvelopeRecord
		human  bool
	}
	fates := map[chunkKey]*chunkFate{}
	var stopped []chunkKey
	for _, r := range recs {
		k := chunkKey{r.Job, r.Chunk}
		if r.Stopped != "" || r.Rejected {
			// It settles a cancelled chunk's effects, or a chunk whose
			// approval a person rejected: not a failure of its own, but a
			// person's decision about the chunk.
			stopped = append(stopped, k)
			continue
		}
		f := fates[k]
		if f == nil {
			f = &chunkFate{latest: r}
			fates[k] = f
		} else if r.CreatedAt.After(f.latest.CreatedAt) || (r.CreatedAt.Equal(f.latest.CreatedAt) && r.ID > f.latest.ID) {
			f.latest = r
		}
		f.human = f.human || r.Human || r.Replays > 0
	}
	for _, k := range stopped {
		if f := fates[k]; f != nil {
			f.human = true
		}
	}
	s := salvagetype.RecoveryStats{DeadLettered: len(fates), Rate: 1}
	for _, f := range fates {
		if f.human {
			continue
		}
		switch l := f.latest; {
		case l.Status == salvagetype.EnvelopeResolved && l.ResolvedBy == "chunk":
			s.Recovered++
		case l.Status == salvagetype.EnvelopeAbandoned && len(l.Left) == 0:
			s.Recovered++
		}
	}
	if s.DeadLettered > 0 {
		s.Rate = float64(s.Recovered) / float64(s.DeadLettered)
	}
	return s
}
