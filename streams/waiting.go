package streams

import (
	"context"
	"encoding/json"
	"strings"

	"github.com/nats-io/nats.go/jetstream"
)

// WaitingScan bounds the job messages FindWaitingJob reads.
const WaitingScan = 1000

// WaitingJob is a job message still in SALVAGE_JOBS: submitted, not split.
type WaitingJob struct {
	Pipeline string
	Seq      uint64
}

// FindWaitingJob looks for job id's message among the first WaitingScan
// messages of SALVAGE_JOBS, a work queue that holds only jobs not yet
// split. ok is false when it is not there (or the stream cannot be read).
func FindWaitingJob(ctx context.Context, js jetstream.JetStream, id string) (WaitingJob, bool) {
	s, err := js.Stream(ctx, Jobs)
	if err != nil {
		return WaitingJob{}, false
	}
	// The lookup's answer carries the state: no second request for it.
	st := s.CachedInfo().State
	// Acked jobs leave gaps between FirstSeq and LastSeq: stop once every
	// message the stream holds was read, not at LastSeq.
	for seq, n, live := st.FirstSeq, 0, uint64(0); seq <= st.LastSeq && n < WaitingScan && live < st.Msgs; seq, n = seq+1, n+1 {
		raw, err := s.GetMsg(ctx, seq)
		if err != nil {
			continue
		}
		live++
		if !messageOfJob(raw, id) {
			continue
		}
		pipeline, _ := ParseJobSubject(raw.Subject)
		return WaitingJob{Pipeline: pipeline, Seq: seq}, true
	}
	return WaitingJob{}, false
}

// messageOfJob reports whether the job message raw names job id: in its
// body's job_id, or its Nats-Msg-Id (the id, or "<id>.<input hash>").
func messageOfJob(raw *jetstream.RawStreamMsg, id string) bool {
	var msg JobMsg
	if json.Unmarshal(raw.Data, &msg) == nil && msg.JobID != nil {
		return *msg.JobID == id
	}
	msgID := raw.Header.Get(HeaderMsgID)
	return msgID == id || strings.HasPrefix(msgID, id+".")
}
