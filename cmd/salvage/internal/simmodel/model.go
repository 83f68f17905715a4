// Package simmodel is the simulated language model the demo pipelines call:
// a latency distribution and injected failures (429 with Retry-After, 5xx,
// timeouts, permanent 400), deterministic for a given seed.
package simmodel

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"sync"
	"time"

	"github.com/salvagehq/salvage"
)

// Config sets the model's behaviour. The zero value answers at once and
// never fails.
type Config struct {
	// Seed makes every draw reproducible.
	Seed int64
	// Latency is the median call latency; 0 answers at once.
	Latency time.Duration
	// Spread is the log-normal sigma of the latency (0.5 if zero).
	Spread float64
	// FailureRate is the chance a call fails transiently: 40% of those are
	// 429s with Retry-After, 40% 5xx, 20% timeouts.
	FailureRate float64
	// PermanentRate is the chance a call fails with a permanent 400.
	PermanentRate float64
	// TimeoutAfter is how long a timed-out call hangs before it fails
	// (4x Latency, at least 5ms, if zero).
	TimeoutAfter time.Duration
}

// Validate names a setting out of range.
func (c Config) Validate() error {
	switch {
	case c.Latency < 0:
		return errors.New("simmodel: Latency must not be negative")
	case c.FailureRate < 0 || c.FailureRate > 1:
		return fmt.Errorf("simmodel: FailureRate %v is not in [0,1]", c.FailureRate)
	case c.PermanentRate < 0 || c.PermanentRate > 1:
		return fmt.Errorf("simmodel: PermanentRate %v is not in [0,1]", c.PermanentRate)
	case c.FailureRate+c.PermanentRate > 1:
		return errors.New("simmodel: FailureRate + PermanentRate exceed 1")
	}
	return nil
}

// Request is one model call. Key identifies the call site (stable across
// retries: job, chunk, agent, per-agent sequence); Prompt decides the
// answer.
type Request struct {
	Key    string
	Prompt string
}

// Response is the model's answer.
type Response struct {
	// Score is a draw in [0, 10] fixed by the seed and the prompt.
	Score int
	// Tokens is a plausible token count for budget accounting.
	Tokens int
}

// maxKeys bounds the per-call-site attempt counters.
const maxKeys = 1 << 17

// Model is safe for concurrent use.
type Model struct {
	cfg      Config
	mu       sync.Mutex
	attempts map[string]int
}

// New returns a model; it fails on a setting out of range.
func New(cfg Config) (*Model, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Spread == 0 {
		cfg.Spread = 0.5
	}
	if cfg.TimeoutAfter == 0 {
		cfg.TimeoutAfter = max(4*cfg.Latency, 5*time.Millisecond)
	}
	return &Model{cfg: cfg, attempts: map[string]int{}}, nil
}

// Config returns the model's settings.
func (m *Model) Config() Config { return m.cfg }

// Complete answers req after a simulated latency, or fails the way the
// configured rates say. The n-th call with one Key draws the n-th outcome
// for that key, so retries of one call site see fresh draws while a whole
// run stays reproducible. It returns a *salvage.CallError on failure and
// ctx's error when cancelled.
func (m *Model) Complete(ctx context.Context, req Request) (Response, error) {
	m.mu.Lock()
	if len(m.attempts) > maxKeys {
		// Long-running processes forget old call sites; only retries
		// close together need distinct draws.
		clear(m.attempts)
	}
	m.attempts[req.Key]++
	n := m.attempts[req.Key]
	m.mu.Unlock()

	u := m.uniform("fail", req.Key, n)
	lat := m.latency(req.Key, n)
	switch {
	case u < m.cfg.PermanentRate:
		return Response{}, salvage.Permanent(400, errors.New("model rejected the request"))
	case u < m.cfg.PermanentRate+m.cfg.FailureRate:
		kind := (u - m.cfg.PermanentRate) / m.cfg.FailureRate
		switch {
		case kind < 0.4:
			after := time.Duration(50+m.uniform("retry-after", req.Key, n)*200) * time.Millisecond
			if err := sleep(ctx, lat/4); err != nil {
				return Response{}, err
			}
			return Response{}, salvage.RateLimited(after, errors.New("model rate limit"))
		case kind < 0.8:
			if err := sleep(ctx, lat/2); err != nil {
				return Response{}, err
			}
			return Response{}, salvage.Transient(503, errors.New("model overloaded"))
		default:
			if err := sleep(ctx, m.cfg.TimeoutAfter); err != nil {
				return Response{}, err
			}
			return Response{}, salvage.Timeout(errors.New("model did not answer in time"))
		}
	}
	if err := sleep(ctx, lat); err != nil {
		return Response{}, err
	}
	score := int(m.uniform("score", req.Prompt, 0) * 11)
	return Response{Score: min(score, 10), Tokens: 200 + len(req.Prompt)/4}, nil
}

// uniform draws in [0,1) from the seed and the given parts.
func (m *Model) uniform(kind, key string, n int) float64 {
	h := sha256.New()
	var b [16]byte
	binary.LittleEndian.PutUint64(b[:8], uint64(m.cfg.Seed))
	binary.LittleEndian.PutUint64(b[8:], uint64(n))
	h.Write(b[:])
	h.Write([]byte(kind))
	h.Write([]byte{0})
	h.Write([]byte(key))
	sum := h.Sum(nil)
	return float64(binary.LittleEndian.Uint64(sum[:8])>>11) / (1 << 53)
}

// latency draws a log-normal latency around the median.
func (m *Model) latency(key string, n int) time.Duration {
	if m.cfg.Latency == 0 {
		return 0
	}
	// Box-Muller from two uniform draws.
	u1 := max(m.uniform("lat1", key, n), 1e-12)
	u2 := m.uniform("lat2", key, n)
	z := math.Sqrt(-2*math.Log(u1)) * math.Cos(2*math.Pi*u2)
	return time.Duration(float64(m.cfg.Latency) * math.Exp(m.cfg.Spread*z))
}

func sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// Score is Complete reduced to its score, the shape contract-review uses.
func (m *Model) Score(ctx context.Context, key, prompt string) (int, error) {
	r, err := m.Complete(ctx, Request{Key: key, Prompt: prompt})
	return r.Score, err
}
