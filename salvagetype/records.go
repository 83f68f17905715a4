package salvagetype

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strings"
	"time"
)

// CallsRetentionMax keeps the pure-call retention inside the time
// SALVAGE_EVENTS keeps the finished event that starts it.
const CallsRetentionMax = 7 * 24 * time.Hour

// ErrInvalidRetention is wrapped by the error of a Retention that cannot
// be used.
var ErrInvalidRetention = errors.New("invalid retention")

// StageOutput is what one agent produced in one stage; later stages read it.
type StageOutput struct {
	Stage  int             `json:"stage"`
	Agent  string          `json:"agent"`
	Output json.RawMessage `json:"output"`
}

// ChunkEvent is one thing that happened to a chunk, for its timeline.
type ChunkEvent struct {
	// Kind is one of the Event* words.
	Kind EventKind `json:"kind"`
	At   time.Time `json:"at"`
	// Delivery is the delivery count of the message a worker took
	// (EventDelivered); Worker the process that took it or recorded the
	// event.
	Delivery uint64 `json:"delivery,omitempty"`
	Worker   string `json:"worker,omitempty"`
	Stage    int    `json:"stage,omitempty"`
	// Detail says more: the system a hold waits for, the envelope of a
	// dead-letter.
	Detail string `json:"detail,omitempty"`
}

// Approval is a person's yes to one stage of one chunk.
type Approval struct {
	Stage int       `json:"stage"`
	By    string    `json:"by"`
	Note  string    `json:"note,omitempty"`
	At    time.Time `json:"at"`
}

// LeftEffect is an effect that may stand and that Salvage did not undo,
// named for the human who must decide.
type LeftEffect struct {
	Tool       string `json:"tool"`
	System     string `json:"system,omitempty"`
	ResourceID string `json:"resource_id,omitempty"`
	JournalKey string `json:"journal_key"`
	// IdempotencyKey is the key the external system saw: look the effect
	// up by it there.
	IdempotencyKey string `json:"idempotency_key,omitempty"`
	// Reversible says its tool declared a compensation (which failed, or
	// was not run: the chunk was escalated for another reason).
	Reversible bool `json:"reversible,omitempty"`
	// Unknown says nobody knows whether the call took effect: it was in
	// flight and could not be verified.
	Unknown bool `json:"unknown,omitempty"`
}

// String names the effect as "tool resource (journal key)", saying when
// its outcome is unknown.
func (l LeftEffect) String() string {
	s := l.Tool + " " + l.ResourceID + " (journal " + l.JournalKey + ")"
	if l.Unknown {
		s += ", outcome unknown"
	}
	return s
}

// DefinitionError says how a process's definition of a pipeline differs
// from the one its pool runs.
type DefinitionError struct {
	Pipeline string
	// Registered is the fingerprint the pool runs, Ours the process's.
	Registered, Ours string
	// By and At say who registered it and when.
	By string
	At time.Time
	// Diff lists the lines only the registered definition has ("- …")
	// and those only ours has ("+ …").
	Diff []string
}

// Error names both fingerprints, what differs and how to upgrade.
func (e *DefinitionError) Error() string {
	s := fmt.Sprintf("pipeline %s: this process defines it as %s, but its workers run %s (registered by %s at %s)",
		e.Pipeline, e.Ours, e.Registered, e.By, e.At.UTC().Format(time.RFC3339))
	if len(e.Diff) > 0 {
		s += "; differs: " + strings.Join(e.Diff, "; ")
	}
	return s + fmt.Sprintf("; to roll out this definition, drain the pipeline's workers and start it as an upgrade to %s", e.Ours)
}

// Is makes errors.Is(err, ErrDefinitionDiffers) true.
func (e *DefinitionError) Is(target error) bool { return target == ErrDefinitionDiffers }

// Budget caps what a job may spend.
type Budget struct {
	Tokens int64   `json:"tokens,omitempty"`
	Cost   float64 `json:"cost,omitempty"`
}

// budgetTokensMax and budgetCostMax bound a job's budget.
const (
	budgetTokensMax = 1_000_000_000_000
	budgetCostMax   = 1_000_000_000
)

// Validate refuses a budget that is not a cap: a negative count or cost,
// a cost that is not a finite number, or either past its bound (a
// trillion tokens, a billion in cost). A nil budget is no cap. Its error
// wraps ErrInvalidJob and names the field.
func (b *Budget) Validate() error {
	if b == nil {
		return nil
	}
	if b.Tokens < 0 || b.Tokens > budgetTokensMax {
		return fmt.Errorf("%w: budget tokens %d: want 0 (no cap) to %d", ErrInvalidJob, b.Tokens, int64(budgetTokensMax))
	}
	if math.IsNaN(b.Cost) || math.IsInf(b.Cost, 0) || b.Cost < 0 || b.Cost > budgetCostMax {
		return fmt.Errorf("%w: budget cost %v: want a number from 0 (no cap) to %d", ErrInvalidJob, b.Cost, int64(budgetCostMax))
	}
	return nil
}

// Exceeded reports whether s spent past b: more tokens than Tokens, or
// more than Cost (each when set).
func (b *Budget) Exceeded(s Summary) bool {
	if b == nil {
		return false
	}
	return (b.Tokens > 0 && s.PromptTokens+s.CompletionTokens > b.Tokens) ||
		(b.Cost > 0 && float64(s.CostMicros) > b.Cost*1e6)
}

// Summary counts a job's chunks by outcome. Done, Cancelled, DeadLettered
// and Degraded are current counts (a recovered chunk moves from
// DeadLettered to Done); DeadLetters, Tier1Retries and Redeliveries count
// events and only grow.
type Summary struct {
	Done         int `json:"done"`
	Cancelled    int `json:"cancelled"`
	DeadLettered int `json:"dead_lettered"`
	// Degraded counts done chunks that skipped optional stages.
	Degraded int `json:"degraded"`
	// DeadLetters counts every time a chunk of the job was dead-lettered.
	DeadLetters  int `json:"dead_letters"`
	Tier1Retries int `json:"tier1_retries"`
	Redeliveries int `json:"redeliveries"`
	// PromptTokens and CompletionTokens add up the model usage of the
	// job's chunks as they reach an outcome; they only grow.
	PromptTokens     int64 `json:"prompt_tokens,omitempty"`
	CompletionTokens int64 `json:"completion_tokens,omitempty"`
	// CostMicros is what that usage cost by Config.Prices, in millionths
	// of the budget's currency; it only grows.
	CostMicros int64 `json:"cost_micros,omitempty"`
}

// Terminal is how many chunks reached an outcome.
func (s Summary) Terminal() int { return s.Done + s.Cancelled + s.DeadLettered }

// Cost is CostMicros in the budget's currency.
func (s Summary) Cost() float64 { return float64(s.CostMicros) / 1e6 }

// Usage is the tokens one model call spent, and the model that spent
// them: what budgets are enforced from.
type Usage struct {
	Model            string `json:"model,omitempty"`
	PromptTokens     int64  `json:"prompt_tokens"`
	CompletionTokens int64  `json:"completion_tokens"`
}

// Retention is how long what a finished job leaves behind is kept, by
// data class. Nothing an open envelope, a parked or held chunk or a
// running job needs is removed: the clocks start when a job finishes,
// and a chunk whose envelope is still open is left whole until it
// settles. Zero fields take the defaults.
type Retention struct {
	// Calls: the pure-call journal rows of a done or cancelled chunk are
	// removed this long after its job finished. Default 1h, at most 7
	// days.
	Calls time.Duration `json:"calls,omitempty"`
	// Effects: the side-effect journal rows of a done or cancelled chunk
	// (what a replay or a verification looks up by idempotency key) are
	// kept this long after its job finished. Default 14 days.
	Effects time.Duration `json:"effects,omitempty"`
	// Records: a finished job's record, its chunks' checkpoints, its
	// settled envelope records and the whole journal of a chunk whose
	// envelope settled are kept this long. Default 30 days.
	Records time.Duration `json:"records,omitempty"`
}

// Or returns r with each zero field taken from d.
func (r Retention) Or(d Retention) Retention {
	if r.Calls <= 0 {
		r.Calls = d.Calls
	}
	if r.Effects <= 0 {
		r.Effects = d.Effects
	}
	if r.Records <= 0 {
		r.Records = d.Records
	}
	return r
}

// WithDefaults returns r with each zero field set to its default.
func (r Retention) WithDefaults() Retention {
	return r.Or(Retention{Calls: CallsRetentionDefault, Effects: EffectsRetentionDefault, Records: RecordsRetentionDefault})
}

// Validate names the first field that cannot work.
func (r Retention) Validate() error {
	switch {
	case r.Calls < 0 || r.Effects < 0 || r.Records < 0:
		return fmt.Errorf("%w: a negative duration (calls %s, effects %s, records %s)", ErrInvalidRetention, r.Calls, r.Effects, r.Records)
	case r.Calls > CallsRetentionMax:
		return fmt.Errorf("%w: calls %s is over %s (SALVAGE_EVENTS keeps the finished event that starts it 14 days)", ErrInvalidRetention, r.Calls, CallsRetentionMax)
	case r.Effects != 0 && r.Effects < r.Calls:
		return fmt.Errorf("%w: effects %s is shorter than calls %s", ErrInvalidRetention, r.Effects, r.Calls)
	}
	return nil
}
