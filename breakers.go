package salvage

import (
	"context"
	"errors"
	"sort"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/salvagehq/salvage/streams"
)

// Breaker is one external system's circuit breaker, as every worker of
// the deployment sees it, with the chunks it holds.
type Breaker struct {
	System string       `json:"system"`
	State  BreakerState `json:"state"`
	// OpenedAt is when it last opened; RetryAt ends the cool-down.
	OpenedAt time.Time `json:"opened_at,omitzero"`
	RetryAt  time.Time `json:"retry_at,omitzero"`
	// Probe is the chunk (<job>.<chunk>) allowed to call while half-open.
	Probe string `json:"probe,omitempty"`
	// Opens counts how often it opened; it never goes down.
	Opens int `json:"opens"`
	// Reason is the failure that last opened it.
	Reason string `json:"reason,omitempty"`
	// Held counts the chunks waiting on SALVAGE_HOLD for this system:
	// those parked when they called it while its breaker was open, and
	// those a job's window admitted there while the breaker paced it
	// (they have not started; their checkpoints say pending).
	Held      int       `json:"held"`
	UpdatedAt time.Time `json:"updated_at"`
}

// BreakerList lists every system whose breaker ever opened, by name, with
// the chunks each holds. A system never listed has a closed breaker.
func (c *Client) BreakerList(ctx context.Context) ([]Breaker, error) {
	st, err := c.storesFor(ctx)
	if err != nil {
		return nil, err
	}
	recs, err := st.Breakers.List(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]Breaker, 0, len(recs))
	for _, r := range recs {
		b := Breaker{System: r.System, State: BreakerState(r.State), OpenedAt: r.OpenedAt, RetryAt: r.RetryAt,
			Probe: r.Probe, Opens: r.Opens, Reason: r.Reason, UpdatedAt: r.UpdatedAt}
		if b.Held, err = c.held(ctx, r.System); err != nil {
			return nil, err
		}
		out = append(out, b)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].System < out[j].System })
	return out, nil
}

// held counts the chunks held for system: what its hold consumer has yet
// to release, in one request whatever their number.
func (c *Client) held(ctx context.Context, system string) (int, error) {
	cons, err := c.js.Consumer(ctx, streams.Hold, streams.System(system).HoldConsumer())
	if errors.Is(err, jetstream.ErrConsumerNotFound) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	info, err := cons.Info(ctx)
	if err != nil {
		return 0, err
	}
	return int(info.NumPending) + info.NumAckPending, nil
}
