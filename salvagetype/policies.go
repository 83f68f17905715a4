package salvagetype

import (
	"fmt"
	"time"
)

// AlertRules are the thresholds; zero fields take the defaults.
type AlertRules struct {
	// BurstCount envelopes arriving within BurstWindow raise a burst alert.
	BurstCount  int
	BurstWindow time.Duration
	// UnresolvedAfter is how long an envelope may stay open or recovering.
	UnresolvedAfter time.Duration
	// UnackedAfter is how long an escalation involving money, or any
	// COMPENSATION_NEEDED envelope, may go unacknowledged.
	UnackedAfter time.Duration
	// MoneySystems are the systems whose effects count as money.
	// Default: payments.
	MoneySystems []string
}

// WithDefaults returns r with each zero field set to its default.
func (r AlertRules) WithDefaults() AlertRules {
	if r.BurstCount <= 0 {
		r.BurstCount = AlertBurstCountDefault
	}
	if r.BurstWindow <= 0 {
		r.BurstWindow = AlertBurstWindowDefault
	}
	if r.UnresolvedAfter <= 0 {
		r.UnresolvedAfter = AlertUnresolvedDefault
	}
	if r.UnackedAfter <= 0 {
		r.UnackedAfter = AlertUnackedDefault
	}
	if len(r.MoneySystems) == 0 {
		r.MoneySystems = []string{"payments"}
	}
	return r
}

// BreakerOpenError is the error a refused call returns.
type BreakerOpenError struct {
	// System is the external system whose breaker refused the call.
	System string
	// State is the breaker's state (open or half-open).
	State BreakerState
	// RetryAt ends the breaker's cool-down.
	RetryAt time.Time
}

// Error names the system and when the breaker may let a probe through.
func (e *BreakerOpenError) Error() string {
	return fmt.Sprintf("circuit breaker of %s is %s (probe after %s)", e.System, e.State, e.RetryAt.Format(time.RFC3339))
}

// Is makes errors.Is(err, ErrBreakerOpen) true.
func (e *BreakerOpenError) Is(target error) bool { return target == ErrBreakerOpen }

// BreakerPolicy is when a breaker opens and how long it stays open. Zero
// fields take the defaults.
type BreakerPolicy struct {
	// Failures in a row, within Window, open the breaker. Default 5.
	Failures int
	// Window bounds how far apart those failures may be. Default 10s.
	Window time.Duration
	// CoolDown is how long the breaker stays open before one probe may
	// call the system. Default 30s.
	CoolDown time.Duration
}

// WithDefaults returns p with zero fields set to their defaults.
func (p BreakerPolicy) WithDefaults() BreakerPolicy {
	if p.Failures <= 0 {
		p.Failures = BreakerFailuresDefault
	}
	if p.Window <= 0 {
		p.Window = BreakerWindowDefault
	}
	if p.CoolDown <= 0 {
		p.CoolDown = BreakerCoolDownDefault
	}
	return p
}

// Validate reports a setting out of range.
func (p BreakerPolicy) Validate() error {
	if p.Failures < 0 || p.Window < 0 || p.CoolDown < 0 {
		return fmt.Errorf("BreakerPolicy fields must not be negative")
	}
	return nil
}
