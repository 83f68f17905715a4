package salvage

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/nats-io/nats.go/micro"

	"github.com/salvagehq/salvage/kv"
	"github.com/salvagehq/salvage/salvagetype"
	"github.com/salvagehq/salvage/streams"
)

// Limit caps the requests every process of a deployment makes together to
// one key; its fields are documented in salvagetype.
type Limit = salvagetype.Limit

// LimitKind is what a limit's key names: its keys are <kind>.<name>.
type LimitKind = salvagetype.LimitKind

// Limit kinds.
const (
	// LimitSystem limits every request to an external system: the tools
	// whose System is the key's name. chatmodel names a model endpoint's
	// System "model-<host>".
	LimitSystem = salvagetype.LimitSystem
	// LimitTool limits the requests of one tool (one model).
	LimitTool = salvagetype.LimitTool
	// LimitTenant limits the work of one tenant's jobs (SubmitOpts.Tenant):
	// its chunks in flight (Limit.Chunks), and the requests its chunks'
	// calls make (the other bounds).
	LimitTenant = salvagetype.LimitTenant
)

var (
	// ErrInvalidLimit is wrapped by the error of a limit that cannot be
	// set.
	ErrInvalidLimit = salvagetype.ErrInvalidLimit
	// ErrUnknownLimit is returned for a key no limit is declared on.
	ErrUnknownLimit = errors.New("salvage: no limit is declared on that key")
	// ErrLimitsNotProvisioned is returned by the limit methods of a
	// deployment provisioned before salvage_limits existed; its workers
	// run unlimited until it is provisioned again (salvage provision).
	ErrLimitsNotProvisioned = salvagetype.ErrLimitsNotProvisioned
	// ErrNotProvisioned is returned when a stream or bucket a call needs
	// does not exist (a watch of a deployment never provisioned).
	ErrNotProvisioned = salvagetype.ErrNotProvisioned
)

// LimitKey is the key of a limit of kind on name.
func LimitKey(kind LimitKind, name string) string { return salvagetype.LimitKey(kind, name) }

// LimitState is a declared limit and what the processes calling its key
// hold of it now.
type LimitState struct {
	Limit
	// Holders counts the processes holding an unexpired share.
	Holders int `json:"holders"`
	// Held is what their shares add up to (never past the limit).
	HeldRequestsPerMinute float64 `json:"held_requests_per_minute"`
	HeldTokensPerMinute   float64 `json:"held_tokens_per_minute"`
	HeldInFlight          int     `json:"held_in_flight"`
	HeldChunks            int     `json:"held_chunks"`
	// Waiting counts the holders that had requests waiting in their last
	// lease.
	Waiting int `json:"waiting"`
	// Recent429s counts the provider's refusals of the key's requests in
	// the last ten minutes, as the processes reported them at their
	// renewals (within a second of each).
	Recent429s int `json:"recent_429s"`
	// PausedUntil, when in the future, holds every request to the key: a
	// provider asked to wait. PauseReason is its answer.
	PausedUntil time.Time `json:"paused_until,omitzero"`
	PauseReason string    `json:"pause_reason,omitempty"`
}

// LimitSet declares l, or changes it, for every process at once (they
// follow the declarations); by says who, for the record. The error wraps
// ErrInvalidLimit for a key that is not <kind>.<name>, a negative bound
// or no bound.
func (c *Client) LimitSet(ctx context.Context, l Limit, by string) (Limit, error) {
	if err := l.Validate(); err != nil {
		return l, err
	}
	st, err := c.storesFor(ctx)
	if err != nil {
		return l, err
	}
	if st.Limits == nil {
		return l, ErrLimitsNotProvisioned
	}
	out := l
	e := AuditEntry{Action: AuditLimitSet, Limit: l.Key, Detail: limitDetail(l)}
	err = c.audited(ctx, &e, streams.AuditScopeLimit, l.Key, by, "", func(by string) (err error) {
		out, err = st.Limits.Set(ctx, l, by)
		return err
	})
	return out, err
}

// limitDetail is a limit's bounds, for its audit entry.
func limitDetail(l Limit) string {
	return fmt.Sprintf("requests_per_minute=%d tokens_per_minute=%d in_flight=%d chunks=%d", l.RequestsPerMinute, l.TokensPerMinute, l.InFlight, l.Chunks)
}

// LimitRemove removes the limit of key: requests to it are no longer
// paced. ErrUnknownLimit when none is declared.
func (c *Client) LimitRemove(ctx context.Context, key string) error {
	st, err := c.storesFor(ctx)
	if err != nil {
		return err
	}
	if st.Limits == nil {
		return ErrLimitsNotProvisioned
	}
	kind, name, _ := strings.Cut(key, ".")
	if salvagetype.ValidateToken("limit kind", kind) != nil || salvagetype.ValidateToken("limit name", name) != nil {
		return fmt.Errorf("%w: %s", ErrUnknownLimit, key)
	}
	e := AuditEntry{Action: AuditLimitRemove, Limit: key}
	return c.audited(ctx, &e, streams.AuditScopeLimit, key, "", "", func(string) error {
		err := st.Limits.Remove(ctx, key)
		if errors.Is(err, kv.ErrNotFound) {
			return fmt.Errorf("%w: %s", ErrUnknownLimit, key)
		}
		return err
	})
}

// LimitList lists every declared limit, by key, with what is held of it.
func (c *Client) LimitList(ctx context.Context) ([]LimitState, error) {
	st, err := c.storesFor(ctx)
	if err != nil {
		return nil, err
	}
	specs, err := st.Limits.List(ctx)
	if err != nil {
		return nil, err
	}
	if len(specs) == 0 {
		return []LimitState{}, nil
	}
	// Two reads whatever the number of keys (a tenant each, say): the
	// dashboard asks every 2 s.
	shares, err := st.Limits.AllShares(ctx)
	if err != nil {
		return nil, err
	}
	now := time.Now()
	out := make([]LimitState, 0, len(specs))
	for _, s := range specs {
		ls := LimitState{Limit: s}
		sh := shares[s.Key]
		for _, h := range sh.Shares {
			if !now.Before(h.Expires) {
				continue
			}
			ls.Holders++
			ls.HeldRequestsPerMinute += h.RequestsPerMinute
			ls.HeldTokensPerMinute += h.TokensPerMinute
			ls.HeldInFlight += h.InFlight
			ls.HeldChunks += h.Chunks
			if h.Wants {
				ls.Waiting++
			}
		}
		if sh.PausedUntil.After(now) {
			ls.PausedUntil, ls.PauseReason = sh.PausedUntil, sh.PauseReason
		}
		ls.Recent429s = sh.RecentRefused(now)
		out = append(out, ls)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Key < out[j].Key })
	return out, nil
}

// declareLimits writes the limits of Config.Limits, as this process's
// configuration declares them.
func (c *Client) declareLimits(ctx context.Context, st *kv.Stores) error {
	if len(c.cfg.Limits) == 0 {
		return nil
	}
	for _, l := range c.cfg.Limits {
		if _, err := st.Limits.Set(ctx, l, "config"); err != nil {
			return err
		}
	}
	return nil
}

// limitRequest is the body of limits.set and limits.remove.
type limitRequest struct {
	Limit
	By     string `json:"by,omitempty"`
	Reason string `json:"reason,omitempty"`
}

// apiLimits lists the limits; the request body is ignored.
func (c *Client) apiLimits(ctx context.Context, _ micro.Request) (any, error) {
	ls, err := c.LimitList(ctx)
	if ls == nil {
		ls = []LimitState{}
	}
	return ls, err
}

// apiSetLimit takes {"key", "requests_per_minute"?, "tokens_per_minute"?,
// "in_flight"?, "chunks"?, "by"?}.
func (c *Client) apiSetLimit(ctx context.Context, req micro.Request) (any, error) {
	var r limitRequest
	if err := decode(req, &r, false); err != nil {
		return nil, err
	}
	return c.LimitSet(WithReason(ctx, r.Reason), r.Limit, r.By)
}

// apiRemoveLimit takes {"key", "by"?}.
func (c *Client) apiRemoveLimit(ctx context.Context, req micro.Request) (any, error) {
	var r limitRequest
	if err := decode(req, &r, false); err != nil {
		return nil, err
	}
	if r.Key == "" {
		return nil, fmt.Errorf(`%w: want {"key", "by"?}`, errMalformed)
	}
	if err := c.LimitRemove(withBy(WithReason(ctx, r.Reason), r.By), r.Key); err != nil {
		return nil, err
	}
	return map[string]string{"removed": r.Key}, nil
}
