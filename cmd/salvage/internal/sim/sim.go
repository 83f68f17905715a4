// Package sim is `salvage sim`: simulated external systems (inventory,
// ERP, payments, email, CRM) and the simulated model, served over HTTP on
// loopback. Systems honour an Idempotency-Key the way payment APIs do (a
// repeat returns the first result and changes nothing), answer verify and
// compensation requests, inject failures on request — including timeouts
// that happen after the effect was committed — and keep a ledger of every
// effect so tests and demos can count duplicates and leftovers.
package sim

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"time"
)

// System describes one simulated external system.
type System struct {
	// Name is the URL token: /v1/<name>/<op>.
	Name string
	// Op is the effect it applies.
	Op string
	// Undo is its compensation op, empty when the effect is irreversible.
	Undo string
}

// Systems are the external systems order fulfilment touches.
var Systems = []System{
	{Name: "wms", Op: "reserve", Undo: "release"},
	{Name: "erp", Op: "invoice", Undo: "void"},
	{Name: "payments", Op: "charge", Undo: "refund"},
	{Name: "email", Op: "send"},
	{Name: "crm", Op: "update", Undo: "revert"},
}

func systemByName(name string) (System, bool) {
	for _, s := range Systems {
		if s.Name == name {
			return s, true
		}
	}
	return System{}, false
}

// Effect is one entry of the ledger.
type Effect struct {
	System string `json:"system"`
	Op     string `json:"op"`
	Key    string `json:"idempotency_key"`
	Order  string `json:"order,omitempty"`
	// ResourceID is the id the system gave the effect (ch_…, inv_…).
	ResourceID string `json:"resource_id"`
	// Requests counts requests made with Key; Applied counts how many of
	// them changed state (more than 1 would be a duplicate).
	Requests int `json:"requests"`
	Applied  int `json:"applied"`
	// Compensated is set when the effect was undone, with the key used.
	Compensated     bool   `json:"compensated"`
	CompensationKey string `json:"compensation_key,omitempty"`
	// CompensationRequests counts undo requests; CompensatedAt is when
	// the first one succeeded.
	CompensationRequests int             `json:"compensation_requests,omitempty"`
	CompensatedAt        time.Time       `json:"compensated_at,omitzero"`
	At                   time.Time       `json:"at"`
	Body                 json.RawMessage `json:"body,omitempty"`
}

// Summary counts the ledger.
type Summary struct {
	Effects     int `json:"effects"`
	Standing    int `json:"standing"`
	Compensated int `json:"compensated"`
	// DuplicateKeys counts effects applied more than once for one key.
	DuplicateKeys int `json:"duplicate_keys"`
	// DuplicateOrders counts (system, order) pairs with more than one
	// standing effect: the same thing done twice under different keys.
	DuplicateOrders int `json:"duplicate_orders"`
}

// Ledger is what GET /ledger returns.
type Ledger struct {
	Effects []Effect `json:"effects"`
	Summary Summary  `json:"summary"`
}

// Faults injects failures into one system. Rates are per request, drawn
// before the effect; a rule for an order wins over the rates.
type Faults struct {
	// ErrorRate answers 503 without applying the effect.
	ErrorRate float64 `json:"error_rate,omitempty"`
	// RateLimitRate answers 429 with Retry-After.
	RateLimitRate float64 `json:"rate_limit_rate,omitempty"`
	// TimeoutBeforeRate hangs past the client's timeout without applying.
	TimeoutBeforeRate float64 `json:"timeout_before_rate,omitempty"`
	// TimeoutAfterRate applies the effect, then hangs past the client's
	// timeout: the caller cannot know it happened.
	TimeoutAfterRate float64 `json:"timeout_after_rate,omitempty"`
	// OutageUntil answers 503 to everything until then.
	OutageUntil time.Time `json:"outage_until,omitzero"`
}

// Rule fails the requests for one order at one system.
type Rule struct {
	System string `json:"system"`
	Order  string `json:"order"`
	// Mode is "permanent" (400), "timeout-after", "timeout-before",
	// "error" (503), or "compensation-fails" (the undo answers 500).
	Mode string `json:"mode"`
	// Times limits how often the rule fires; 0 means always.
	Times int `json:"times,omitempty"`
}

// Config is the sim's fault configuration (GET/POST /admin/faults).
type Config struct {
	Systems map[string]Faults `json:"systems,omitempty"`
	Rules   []Rule            `json:"rules,omitempty"`
	// Quotas are the model's rate limits, by the model a request names
	// (salvage-sim when it names none).
	Quotas map[string]Quota `json:"quotas,omitempty"`
	// Hang is how long a timeout hangs. Default 2s.
	Hang time.Duration `json:"hang,omitempty"`
	Seed uint64        `json:"seed,omitempty"`
}

// Requests counts what one system was asked (GET /admin/requests):
// every request, effects, verifications and compensations alike, and
// those that arrived during an outage.
type Requests struct {
	Requests     int `json:"requests"`
	DuringOutage int `json:"during_outage"`
	// PerSecond counts the requests of each wall-clock second that had
	// any, oldest first, the last perSecondMax of them.
	PerSecond []SecondCount `json:"per_second,omitempty"`
}

// SecondCount is the requests one system got in one second.
type SecondCount struct {
	Unix int64 `json:"unix"`
	N    int   `json:"n"`
}

// perSecondMax bounds Requests.PerSecond: an hour of busy seconds.
const perSecondMax = 3600

// Peak returns the most requests of any second from since on.
func (r Requests) Peak(since time.Time) int {
	peak := 0
	for _, s := range r.PerSecond {
		if s.Unix >= since.Unix() {
			peak = max(peak, s.N)
		}
	}
	return peak
}

// State is the sim's memory: effects by system and key, faults.
type State struct {
	mu       sync.Mutex
	effects  map[string]*Effect // system/key
	requests map[string]*Requests
	order    []*Effect
	cfg      Config
	fired    map[int]int // rule index -> times fired
	stopped  map[int]bool
	rng      *rand.Rand
	seq      int
	// quotas has a lock of its own: model calls do not wait on effects.
	quotas quotas
}

// NewState returns an empty sim.
func NewState(cfg Config) *State {
	s := &State{effects: map[string]*Effect{}, requests: map[string]*Requests{}, fired: map[int]int{}}
	s.setConfig(cfg)
	return s
}

func (s *State) setConfig(cfg Config) {
	if cfg.Hang <= 0 {
		cfg.Hang = 2 * time.Second
	}
	s.cfg = cfg
	s.quotas.set(cfg.Quotas)
	s.fired, s.stopped = map[int]int{}, map[int]bool{}
	s.rng = rand.New(rand.NewPCG(cfg.Seed, 0x51a))
}

// hit counts a request to system and reports whether the system is in
// an outage. Lock held.
func (s *State) hit(system string) (down bool) {
	r := s.requests[system]
	if r == nil {
		r = &Requests{}
		s.requests[system] = r
	}
	r.Requests++
	now := time.Now()
	if n := len(r.PerSecond); n > 0 && r.PerSecond[n-1].Unix == now.Unix() {
		r.PerSecond[n-1].N++
	} else {
		r.PerSecond = append(r.PerSecond, SecondCount{Unix: now.Unix(), N: 1})
		if len(r.PerSecond) > perSecondMax {
			r.PerSecond = r.PerSecond[len(r.PerSecond)-perSecondMax:]
		}
	}
	if now.Before(s.cfg.Systems[system].OutageUntil) {
		r.DuringOutage++
		return true
	}
	return false
}

// QuotaUse returns what each model's quota admitted and refused.
func (s *State) QuotaUse() map[string]QuotaUse { return s.quotas.Use() }

// Requests returns the request counts by system.
func (s *State) Requests() map[string]Requests {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[string]Requests, len(s.requests))
	for k, v := range s.requests {
		c := *v
		c.PerSecond = slices.Clone(v.PerSecond)
		out[k] = c
	}
	return out
}

// decision is what a request will meet.
type decision struct {
	status     int // 0: apply
	retryAfter time.Duration
	hangBefore bool
	hangAfter  bool
	undoFails  bool
}

// StopRules stops the rules of system for order from firing again,
// leaving every other rule and its count as it is, and returns how many
// it stopped. A test ends a fault when it has seen what the fault was
// for, not after a count of requests that depends on how often a
// loaded machine retried.
func (s *State) StopRules(system, order string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for i, r := range s.cfg.Rules {
		if r.System == system && r.Order == order && !s.stopped[i] {
			s.stopped[i] = true
			n++
		}
	}
	return n
}

// decide draws the fault for a request at system for order. Lock held.
func (s *State) decide(system, order string, undo bool) decision {
	for i, r := range s.cfg.Rules {
		if r.System != system || r.Order != order || (r.Times > 0 && s.fired[i] >= r.Times) || s.stopped[i] {
			continue
		}
		if undo != (r.Mode == "compensation-fails") {
			continue
		}
		s.fired[i]++
		switch r.Mode {
		case "permanent":
			return decision{status: 400}
		case "timeout-after":
			return decision{hangAfter: true}
		case "timeout-before":
			return decision{hangBefore: true}
		case "error":
			return decision{status: 503}
		case "compensation-fails":
			return decision{undoFails: true}
		}
	}
	f := s.cfg.Systems[system]
	if time.Now().Before(f.OutageUntil) {
		return decision{status: 503}
	}
	if undo {
		return decision{}
	}
	u := s.rng.Float64()
	switch {
	case u < f.ErrorRate:
		return decision{status: 503}
	case u < f.ErrorRate+f.RateLimitRate:
		return decision{status: 429, retryAfter: time.Duration(20+s.rng.IntN(80)) * time.Millisecond}
	case u < f.ErrorRate+f.RateLimitRate+f.TimeoutBeforeRate:
		return decision{hangBefore: true}
	case u < f.ErrorRate+f.RateLimitRate+f.TimeoutBeforeRate+f.TimeoutAfterRate:
		return decision{hangAfter: true}
	}
	return decision{}
}

// apply records an effect for key, or returns the first one for a repeat.
// Lock held.
func (s *State) apply(sys System, key, order string, body json.RawMessage) *Effect {
	id := sys.Name + "/" + key
	if e, ok := s.effects[id]; ok {
		e.Requests++
		return e
	}
	s.seq++
	e := &Effect{
		System: sys.Name, Op: sys.Op, Key: key, Order: order, Requests: 1, Applied: 1, At: time.Now().UTC(), Body: body,
		ResourceID: fmt.Sprintf("%s_%06d", sys.Op[:3], s.seq),
	}
	s.effects[id] = e
	s.order = append(s.order, e)
	return e
}

// Ledger returns every effect, in order, and the counts.
func (s *State) Ledger() Ledger {
	s.mu.Lock()
	defer s.mu.Unlock()
	l := Ledger{Effects: make([]Effect, 0, len(s.order)), Summary: s.summary()}
	for _, e := range s.order {
		l.Effects = append(l.Effects, *e)
	}
	return l
}

// Summary counts the ledger without listing it: an answer of the same
// size however many effects the sim has seen.
func (s *State) Summary() Summary {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.summary()
}

// summary counts the ledger; s.mu is held.
func (s *State) summary() Summary {
	var sum Summary
	standing := map[string]int{}
	for _, e := range s.order {
		sum.Effects++
		if e.Applied > 1 {
			sum.DuplicateKeys++
		}
		if e.Compensated {
			sum.Compensated++
			continue
		}
		sum.Standing++
		if e.Order != "" {
			standing[e.System+"/"+e.Order]++
		}
	}
	for _, n := range standing {
		if n > 1 {
			sum.DuplicateOrders++
		}
	}
	return sum
}
