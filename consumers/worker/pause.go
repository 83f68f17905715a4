package worker

import (
	"context"
	"sync"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/salvagehq/salvage/kv"
	"github.com/salvagehq/salvage/salvagetype"
	"github.com/salvagehq/salvage/streams"
)

// pauses is a process's view of which pipelines are paused, read from a
// watch of salvage_pipelines so asking costs no request.
type pauses struct {
	js  jetstream.JetStream
	log zerolog.Logger

	mu   sync.Mutex
	seen map[string]kv.PipelineState
	// ready is closed once the watch has delivered every stored state.
	ready     chan struct{}
	readyOnce sync.Once
}

func newPauses(js jetstream.JetStream, log zerolog.Logger) *pauses {
	return &pauses{js: js, log: log, seen: map[string]kv.PipelineState{}, ready: make(chan struct{})}
}

// follow keeps the view current until ctx ends. It blocks.
func (p *pauses) follow(ctx context.Context) {
	_ = kv.Follow(ctx, p.js, kv.BucketPipelines, jetstream.AllKeys, p.update, func(err error) error {
		p.log.Debug().Err(err).Msg("pipeline watch ended; restarting")
		return nil
	})
}

func (p *pauses) update(e jetstream.KeyValueEntry) {
	if e == nil {
		p.readyOnce.Do(func() { close(p.ready) })
		return
	}
	st, ok := kv.DecodePipelineState(e)
	p.mu.Lock()
	defer p.mu.Unlock()
	if !ok {
		delete(p.seen, e.Key())
		return
	}
	p.seen[st.Pipeline] = st
}

// paused reports whether pipeline is paused, as last seen.
func (p *pauses) paused(pipeline string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.seen[pipeline].Paused
}

// all returns every pipeline state seen.
func (p *pauses) all() []kv.PipelineState {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([]kv.PipelineState, 0, len(p.seen))
	for _, st := range p.seen {
		out = append(out, st)
	}
	return out
}

// pause parks the chunk before stage while its pipeline is paused: its
// checkpoint says paused, a copy of its message waits on
// salvage.hold.paused-<pipeline>.<job>.<chunk>, whose consumer stays
// paused until the pipeline resumes, and the delivery is acked. Work
// already inside a stage finishes it first.
func (r *run) pause(ctx context.Context, cp kv.Checkpoint, fence *kv.Fence, stage int) error {
	cp.ClearLastError()
	cp.Status, cp.Stage = salvagetype.ChunkPaused, stage
	cp.Record(salvagetype.ChunkEvent{Kind: salvagetype.EventPaused, Worker: r.w.cfg.ID, Stage: stage})
	if err := r.park(ctx, cp, fence, streams.Pipeline(r.chunk.Pipeline).PausedSystem(), "pipeline "+r.chunk.Pipeline+" paused"); err != nil {
		return err
	}
	r.log.Info().Int("stage", stage).Msg("chunk parked: its pipeline is paused")
	return nil
}
