package dashboard

import (
	"context"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"github.com/salvagehq/salvage"
)

// breakerPollInterval is how often the breakers and their held counts
// are read: one request for the bucket and one per system that ever
// opened, whatever the number of chunks held.
const breakerPollInterval = 2 * time.Second

// breakerPoll keeps the latest read of the circuit breakers and of the
// pipelines (paused or not, and what each has parked).
type breakerPoll struct {
	mu        sync.Mutex
	last      []salvage.Breaker
	pipelines []salvage.PipelineStatus
	// limits are the declared rate limits and what is held of each.
	limits []salvage.LimitState
}

// run reads the breakers every breakerPollInterval until ctx ends.
func (p *breakerPoll) run(ctx context.Context, c *salvage.Client, log zerolog.Logger) {
	t := time.NewTicker(breakerPollInterval)
	defer t.Stop()
	for {
		bs, err := c.BreakerList(ctx)
		if err != nil && ctx.Err() == nil {
			log.Debug().Err(err).Msg("read the circuit breakers")
		} else if err == nil {
			p.mu.Lock()
			p.last = bs
			p.mu.Unlock()
		}
		p.readPipelines(ctx, c, log)
		if ls, err := c.LimitList(ctx); err != nil {
			if ctx.Err() == nil {
				log.Debug().Err(err).Msg("read the rate limits")
			}
		} else {
			p.mu.Lock()
			p.limits = ls
			p.mu.Unlock()
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// readPipelines reads the pipelines now: each poll, and after a pause or
// resume from the page, which shows it at once.
func (p *breakerPoll) readPipelines(ctx context.Context, c *salvage.Client, log zerolog.Logger) {
	ps, err := c.PipelineList(ctx)
	if err != nil {
		if ctx.Err() == nil {
			log.Debug().Err(err).Msg("read the pipelines")
		}
		return
	}
	p.mu.Lock()
	p.pipelines = ps
	p.mu.Unlock()
}

func (p *breakerPoll) pipelineSnapshot() []salvage.PipelineStatus {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]salvage.PipelineStatus{}, p.pipelines...)
}

func (p *breakerPoll) limitSnapshot() []salvage.LimitState {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]salvage.LimitState{}, p.limits...)
}

func (p *breakerPoll) snapshot() []salvage.Breaker {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]salvage.Breaker{}, p.last...)
}
