package kv

import (
	"time"

	"github.com/salvagehq/salvage/salvagetype"
)

// breakerVerdict is what a breaker says of one call.
type breakerVerdict int

// Verdicts of Breaker.Allows.
const (
	// VerdictAllow lets the call through.
	VerdictAllow breakerVerdict = iota
	// verdictRefuse fails the call fast: the breaker is open, or
	// half-open with another chunk as the probe.
	verdictRefuse
	// VerdictTakeProbe lets the call through once the caller has made
	// its chunk the probe of a half-open breaker, by CAS.
	VerdictTakeProbe
)

// Allows decides whether chunk (<job>.<chunk>) may call the breaker's
// system now. A missing breaker (the zero value) is closed. An open
// breaker refuses even after its cool-down, until a holder moves it to
// half-open and picks the probe: only then may one chunk call.
func (b Breaker) Allows(chunk string) breakerVerdict {
	switch b.State {
	case salvagetype.BreakerOpen:
		return verdictRefuse
	case salvagetype.BreakerHalfOpen:
		switch b.Probe {
		case chunk:
			return VerdictAllow
		case "":
			return VerdictTakeProbe
		}
		return verdictRefuse
	}
	return VerdictAllow
}

// Open moves b to open at now for p's cool-down, for reason.
func (b *Breaker) Open(p salvagetype.BreakerPolicy, now time.Time, reason string) {
	p = p.WithDefaults()
	b.State, b.OpenedAt, b.RetryAt = salvagetype.BreakerOpen, now.UTC(), now.Add(p.CoolDown).UTC()
	b.Probe, b.ProbeAt, b.ProbePipeline, b.Reason = "", time.Time{}, "", reason
	b.Opens++
}

// Close moves b to closed.
func (b *Breaker) Close() {
	b.State, b.Probe, b.ProbeAt, b.ProbePipeline = salvagetype.BreakerClosed, "", time.Time{}, ""
}

// HalfOpen moves b to half-open with probe (empty: the first chunk to
// call takes it) at now.
func (b *Breaker) HalfOpen(probe string, now time.Time) {
	b.State, b.Probe, b.ProbeAt, b.ProbePipeline = salvagetype.BreakerHalfOpen, probe, now.UTC(), ""
}

// ProbeOverdue reports whether b's probe has had a whole cool-down
// without an answer (its worker died, or its chunk never called the
// system again): it counts as failed, and the breaker opens again. A
// half-open breaker nobody has called yet is not overdue.
func (b Breaker) ProbeOverdue(p salvagetype.BreakerPolicy, now time.Time) bool {
	p = p.WithDefaults()
	return b.State == salvagetype.BreakerHalfOpen && b.Probe != "" && now.Sub(b.ProbeAt) > p.CoolDown
}
