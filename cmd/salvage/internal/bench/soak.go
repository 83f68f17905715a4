package bench

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/salvagehq/salvage"
	"github.com/salvagehq/salvage/cmd/salvage/internal/contractreview"
	"github.com/salvagehq/salvage/cmd/salvage/internal/operator"
	"github.com/salvagehq/salvage/cmd/salvage/internal/simmodel"
)

// The soak's shape: small jobs back to back under retention shortened so
// that a record lives soakKeep.Records, and the run lasts many of those
// lifetimes.
var soakKeep = salvage.Retention{Calls: time.Second, Effects: 3 * time.Second, Records: 6 * time.Second}

const (
	soakJobChunks = 20
	soakInFlight  = 2
	soakEvery     = 2 * time.Second
	// soakPermanentRate fails some model calls for good, so that some
	// chunks end dead-lettered and their envelopes settle (dead end).
	soakPermanentRate = 0.0005
	// targetSoakGrowth is how much the retention-governed stores may
	// grow from the run's second quarter to its second half.
	targetSoakGrowth = 0.25
	// soakDrainMax bounds how long the soak waits, once its jobs
	// stopped, for retention to bring the governed stores down to a
	// quarter of their peak.
	soakDrainMax = 2 * time.Minute
)

// soakRow is what the soak measured.
type soakRow struct {
	SyncInterval string            `json:"sync_interval"`
	Duration     time.Duration     `json:"duration_ns"`
	Retention    salvage.Retention `json:"retention"`
	Jobs         int               `json:"jobs"`
	Chunks       int               `json:"chunks"`
	DeadLettered int               `json:"dead_lettered"`
	// Samples are the bytes on disk every soakEvery: Governed sums the
	// stores retention governs (the journal, the job, checkpoint and
	// envelope buckets), Aged the streams kept by age (results, DLQ,
	// events...).
	Samples []soakSample `json:"samples"`
	// Drained is the first sample after the jobs stopped at or below a
	// quarter of the peak — what retention leaves once it caught up —
	// or the last one taken within soakDrainMax.
	Drained *soakSample `json:"drained,omitempty"`
}

// peak is the largest governed sample.
func (r soakRow) peak() uint64 {
	var p uint64
	for _, s := range r.Samples {
		p = max(p, s.Governed)
	}
	return p
}

type soakSample struct {
	AtSecs   float64 `json:"at_seconds"`
	Governed uint64  `json:"governed_bytes"`
	Aged     uint64  `json:"aged_bytes"`
}

// growth compares the mean of the second half's samples with the second
// quarter's: a store that levels off stays within targetSoakGrowth.
func (r soakRow) growth() float64 {
	n := len(r.Samples)
	if n < 8 {
		return 0
	}
	mean := func(from, to int) float64 {
		var sum float64
		for _, s := range r.Samples[from:to] {
			sum += float64(s.Governed)
		}
		return sum / float64(to-from)
	}
	q := mean(n/4, n/2)
	if q == 0 {
		return 0
	}
	return mean(n/2, n)/q - 1
}

func (r soakRow) verdict() string {
	return fmt.Sprintf("governed bytes grow ≤ %.0f%% from the second quarter to the second half: %s", targetSoakGrowth*100,
		verdict(len(r.Samples) >= 8 && r.growth() <= targetSoakGrowth))
}

// soak runs contract-review jobs of soakJobChunks chunks, soakInFlight at
// once, for d, on one in-process client with every role, and samples the
// disk use of every stream and bucket.
func (b *bench) soak(ctx context.Context, d time.Duration) (soakRow, error) {
	row := soakRow{SyncInterval: "default", Duration: d, Retention: soakKeep}
	s, err := startBenchServer(0)
	if err != nil {
		return row, err
	}
	defer s.close()
	model, err := simmodel.New(simmodel.Config{Seed: 7, PermanentRate: soakPermanentRate})
	if err != nil {
		return row, err
	}
	p, err := growthPipeline(model.Tool(contractreview.ModelTool))
	if err != nil {
		return row, err
	}
	c, stop, err := b.startClient(ctx, s, &salvage.Config{
		Pipelines: []*salvage.Pipeline{p}, Roles: salvage.DefaultRoles(), Retries: -1, Concurrency: 16,
		Retention: soakKeep, SweepInterval: time.Second,
	})
	if err != nil {
		return row, err
	}
	defer stop()

	start := time.Now()
	var mu sync.Mutex
	sampleCtx, stopSampling := context.WithCancel(ctx)
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		b.sampleSoak(sampleCtx, s.js, start, &mu, &row)
	}()
	var wg sync.WaitGroup
	var runErr error
	for range soakInFlight {
		wg.Go(func() {
			for time.Since(start) < d && ctx.Err() == nil {
				id, err := c.JobSubmit(ctx, growthPipelineName, map[string]int{"chunks": soakJobChunks}, nil)
				var j *salvage.Job
				if err == nil {
					j, err = c.JobWait(ctx, id)
				}
				mu.Lock()
				if err != nil {
					runErr = err
					mu.Unlock()
					return
				}
				row.Jobs++
				row.Chunks += j.Chunks
				row.DeadLettered += j.Summary.DeadLettered
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	stopSampling()
	<-sampled
	if runErr == nil {
		row.Drained = b.drain(ctx, s.js, start, row.peak())
	}
	return row, runErr
}

// sampleSoak appends a sample of the disk use to row every soakEvery,
// under mu, until ctx ends.
func (b *bench) sampleSoak(ctx context.Context, js jetstream.JetStream, start time.Time, mu *sync.Mutex, row *soakRow) {
	for {
		g, a, err := diskUse(ctx, js)
		if ctx.Err() != nil {
			// Stopped while listing: what it summed is part of the
			// streams, not a sample (CI once saw it as 0 bytes).
			return
		}
		if err == nil {
			mu.Lock()
			row.Samples = append(row.Samples, soakSample{AtSecs: time.Since(start).Seconds(), Governed: g, Aged: a})
			mu.Unlock()
		} else {
			b.log.Warn().Err(err).Msg("soak: list the streams; sample skipped")
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(soakEvery):
		}
	}
}

// drain samples the disk use every soakEvery, once the jobs stopped,
// until retention brought the governed stores to a quarter of peak or
// soakDrainMax passed, and returns that sample (nil when none could be
// taken). On a busy machine retention catches up later, not less: the
// soak's verdict on the drain is by the event, not by a time.
func (b *bench) drain(ctx context.Context, js jetstream.JetStream, start time.Time, peak uint64) *soakSample {
	var last *soakSample
	deadline := time.Now().Add(soakDrainMax)
	for ctx.Err() == nil {
		if g, a, err := diskUse(ctx, js); err == nil {
			last = &soakSample{AtSecs: time.Since(start).Seconds(), Governed: g, Aged: a}
			if g <= peak/4 {
				return last
			}
		}
		if time.Now().After(deadline) {
			return last
		}
		select {
		case <-ctx.Done():
		case <-time.After(soakEvery):
		}
	}
	return last
}

// diskUse sums the bytes of the streams retention governs and of the
// others; a listing cut short is an error, not a smaller sum.
func diskUse(ctx context.Context, js jetstream.JetStream) (governed, aged uint64, err error) {
	lister := js.ListStreams(ctx)
	for info := range lister.Info() {
		switch {
		case operator.ByRetention(info.Config):
			governed += info.State.Bytes
		case strings.HasPrefix(info.Config.Name, "SALVAGE_") || strings.HasPrefix(info.Config.Name, "KV_salvage_") || strings.HasPrefix(info.Config.Name, "OBJ_salvage_"):
			aged += info.State.Bytes
		}
	}
	return governed, aged, lister.Err()
}
