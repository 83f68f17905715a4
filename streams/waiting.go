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
	info, err := s.Info(ctx)
	if err != nil || info.State.Msgs == 0 {
		return WaitingJob{}, false
	}
	for seq, n := info.State.FirstSeq, 0; seq <= info.State.LastSeq && n < WaitingScan; seq, n = seq+1, n+1 {
		raw, err := s.GetMsg(ctx, seq)
		if err != nil || !messageOfJob(raw, id) {
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
