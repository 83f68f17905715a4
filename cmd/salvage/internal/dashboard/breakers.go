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

// breakerPoll keeps the latest read of the circuit breakers.
type breakerPoll struct {
	mu   sync.Mutex
	last []salvage.Breaker
}

// run reads the breakers every breakerPollInterval until ctx ends.
func (p *breakerPoll) run(ctx context.Context, c *salvage.Client, log zerolog.Logger) {
	t := time.NewTicker(breakerPollInterval)
	defer t.Stop()
	for {
		bs, err := c.Breakers(ctx)
		if err != nil && ctx.Err() == nil {
			log.Debug().Err(err).Msg("read the circuit breakers")
		} else if err == nil {
			p.mu.Lock()
			p.last = bs
			p.mu.Unlock()
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func (p *breakerPoll) snapshot() []salvage.Breaker {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]salvage.Breaker{}, p.last...)
}
