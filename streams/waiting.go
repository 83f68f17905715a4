package streams

import (
	"context"
	"encoding/json"
	"strings"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/salvagehq/salvage/salvagetype"
)

// waitingScan bounds the job messages FindWaitingJob reads.
const waitingScan = 1000

// waitingJob is a job message still in SALVAGE_JOBS: submitted, not split.
type waitingJob struct {
	Pipeline string
	Seq      uint64
}

// FindWaitingJob looks for job id's message among the first waitingScan
// messages of SALVAGE_JOBS, a work queue that holds only jobs not yet
// split. ok is false when it is not there (or the stream cannot be read).
func FindWaitingJob(ctx context.Context, js jetstream.JetStream, id string) (waitingJob, bool) {
	s, err := js.Stream(ctx, Jobs)
	if err != nil {
		return waitingJob{}, false
	}
	// The lookup's answer carries the state: no second request for it.
	st := s.CachedInfo().State
	// Acked jobs leave gaps between FirstSeq and LastSeq: stop once every
	// message the stream holds was read, not at LastSeq.
	for seq, n, live := st.FirstSeq, 0, uint64(0); seq <= st.LastSeq && n < waitingScan && live < st.Msgs; seq, n = seq+1, n+1 {
		raw, err := s.GetMsg(ctx, seq)
		if err != nil {
			continue
		}
		live++
		if !messageOfJob(raw, id) {
			continue
		}
		pipeline, _ := ParseJobSubject(raw.Subject)
		return waitingJob{Pipeline: pipeline, Seq: seq}, true
	}
	return waitingJob{}, false
}

// messageOfJob reports whether the job message raw names job id: in its
// body's job_id, or its Nats-Msg-Id (the id, or "<id>.<input hash>").
func messageOfJob(raw *jetstream.RawStreamMsg, id string) bool {
	var msg salvagetype.JobMsg
	if json.Unmarshal(raw.Data, &msg) == nil && msg.JobID != nil {
		return *msg.JobID == id
	}
	msgID := raw.Header.Get(salvagetype.HeaderMsgID)
	return msgID == id || strings.HasPrefix(msgID, id+".")
}
