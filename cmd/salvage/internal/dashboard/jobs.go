package dashboard

import (
	"context"
	"encoding/json"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/salvagehq/salvage/kv"
)

// jobIndex keeps every job record in memory, current through a watch on
// salvage_jobs, so a summary costs no read per job.
type jobIndex struct {
	mu    sync.Mutex
	jobs  map[string]kv.Job
	ready chan struct{}
	once  sync.Once
}

func newJobIndex() *jobIndex {
	return &jobIndex{jobs: map[string]kv.Job{}, ready: make(chan struct{})}
}

// follow watches salvage_jobs until ctx ends, starting over after an
// interruption. It blocks.
func (x *jobIndex) follow(ctx context.Context, js jetstream.JetStream, log zerolog.Logger) {
	for ctx.Err() == nil {
		b, err := js.KeyValue(ctx, kv.BucketJobs)
		if err == nil {
			err = x.watch(ctx, b)
		}
		if ctx.Err() == nil {
			log.Debug().Err(err).Msg("job watch ended; restarting")
			select {
			case <-ctx.Done():
			case <-time.After(time.Second):
			}
		}
	}
}

func (x *jobIndex) watch(ctx context.Context, b jetstream.KeyValue) error {
	w, err := b.WatchAll(ctx)
	if err != nil {
		return err
	}
	defer w.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case e, ok := <-w.Updates():
			if !ok {
				return nil
			}
			if e == nil {
				// Every existing record has been delivered.
				x.once.Do(func() { close(x.ready) })
				continue
			}
			x.mu.Lock()
			var j kv.Job
			if e.Operation() != jetstream.KeyValuePut {
				delete(x.jobs, e.Key())
			} else if json.Unmarshal(e.Value(), &j) == nil {
				x.jobs[e.Key()] = j
			}
			x.mu.Unlock()
		}
	}
}

// snapshot returns the jobs as they stand, once the watch has caught up
// (or after a short wait, so a summary never hangs).
func (x *jobIndex) snapshot() []kv.Job {
	select {
	case <-x.ready:
	case <-time.After(2 * time.Second):
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	out := make([]kv.Job, 0, len(x.jobs))
	for _, j := range x.jobs {
		out = append(out, j)
	}
	return out
}
