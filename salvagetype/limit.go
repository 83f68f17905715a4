package salvagetype

import (
	"errors"
	"fmt"
	"strings"
	"time"
)

// Limit caps the requests every process of a deployment makes together to
// one key: a model provider or another external system (every tool whose
// System is its name: LimitSystem), one tool (LimitTool), or the work of
// one tenant's jobs (LimitTenant: its calls, and its chunks in flight).
// Each process calling the key leases a share of it from salvage_limits
// and spends the share without a round trip per request; a request that
// must wait waits in its worker (its chunk's heartbeat keeps its
// message). A provider's 429 holds the key for every process for the wait
// it names.
type Limit struct {
	// Key is LimitKey(kind, name): "system.<system>", "tool.<tool>" or
	// "tenant.<tenant>".
	Key string `json:"key"`
	// RequestsPerMinute and TokensPerMinute bound what the fleet sends in
	// any minute (tokens as a model call's input is estimated before it
	// is sent, corrected by the usage it reports); InFlight the requests
	// open at once. 0 is no bound; at least one is required.
	RequestsPerMinute int   `json:"requests_per_minute,omitempty"`
	TokensPerMinute   int64 `json:"tokens_per_minute,omitempty"`
	InFlight          int   `json:"in_flight,omitempty"`
	// Chunks bounds how many of a tenant's chunks run at once across the
	// fleet (tenant keys only). A chunk past it waits for its turn in a
	// worker without holding the worker's slot, which goes to another
	// tenant's chunk: a tenant with thousands of chunks queued leaves
	// room for the others. 0 is no bound.
	Chunks int `json:"chunks,omitempty"`
	// SetBy and SetAt say who declared it last, and when.
	SetBy string    `json:"set_by,omitempty"`
	SetAt time.Time `json:"set_at,omitzero"`
}

// LimitKey is the key of a limit of kind on name.
func LimitKey(kind LimitKind, name string) string { return string(kind) + "." + name }

// ErrInvalidLimit is wrapped by the error of a limit that cannot be set.
var ErrInvalidLimit = errors.New("invalid limit")

// Validate reports a limit that cannot be set (ErrInvalidLimit): a key that is not
// <kind>.<name> with a known kind and a name fit for a subject token, a
// negative bound, or no bound at all.
func (l Limit) Validate() error {
	k, name, ok := strings.Cut(l.Key, ".")
	kind := LimitKind(k)
	if !ok || (kind != LimitSystem && kind != LimitTool && kind != LimitTenant) {
		return fmt.Errorf("%w: key %q: want %s.<name>, %s.<name> or %s.<name>", ErrInvalidLimit, l.Key, LimitSystem, LimitTool, LimitTenant)
	}
	if err := ValidateToken("limit name", name); err != nil {
		return fmt.Errorf("%w: key %q: %w", ErrInvalidLimit, l.Key, err)
	}
	if l.RequestsPerMinute < 0 || l.TokensPerMinute < 0 || l.InFlight < 0 || l.Chunks < 0 {
		return fmt.Errorf("%w: %s: bounds must not be negative", ErrInvalidLimit, l.Key)
	}
	if l.Chunks > 0 && kind != LimitTenant {
		return fmt.Errorf("%w: %s: chunks in flight bound a tenant's work only (%s.<name>)", ErrInvalidLimit, l.Key, LimitTenant)
	}
	if l.RequestsPerMinute == 0 && l.TokensPerMinute == 0 && l.InFlight == 0 && l.Chunks == 0 {
		return fmt.Errorf("%w: %s: no bound (requests or tokens per minute, calls or chunks in flight)", ErrInvalidLimit, l.Key)
	}
	return nil
}
