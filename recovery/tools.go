package recovery

import (
	"errors"
	"fmt"
	"slices"

	"github.com/salvagehq/salvage/salvagetype"
	"github.com/salvagehq/salvage/streams"
)

// errUnknownTool is returned when an agent calls a tool its pipeline did
// not register.
var errUnknownTool = errors.New("unknown tool")

// Tools is a pipeline's tool registry.
type Tools struct {
	m map[string]*salvagetype.Tool
	// systems are the Systems of the tools, each once, sorted.
	systems []string
}

// NewTools registers ts. It returns an error wrapping ErrInvalidTool for a
// tool without a name or call, a System that is not a subject token (or
// is reserved: "approval" or "paused-…"), a duplicate, a reversible side effect
// without a registered compensation tool, or a side effect without Verify.
func NewTools(ts ...salvagetype.Tool) (*Tools, error) {
	r := &Tools{m: map[string]*salvagetype.Tool{}}
	for i := range ts {
		t := ts[i]
		if t.Name == "" || t.Call == nil {
			return nil, fmt.Errorf("%w: tool %d needs a Name and a Call (a Subject is bound to a Call by the root package)", ErrInvalidTool, i)
		}
		if streams.System(t.System).Reserved() {
			return nil, fmt.Errorf("%w: %s: system name %q is reserved", ErrInvalidTool, t.Name, t.System)
		}
		if t.System != "" {
			if err := salvagetype.ValidateToken("system", t.System); err != nil {
				return nil, fmt.Errorf("%w: %s: %w", ErrInvalidTool, t.Name, err)
			}
		}
		if _, dup := r.m[t.Name]; dup {
			return nil, fmt.Errorf("%w: %s registered twice", ErrInvalidTool, t.Name)
		}
		r.m[t.Name] = &t
		if t.System != "" && !slices.Contains(r.systems, t.System) {
			r.systems = append(r.systems, t.System)
		}
	}
	slices.Sort(r.systems)
	for _, t := range r.m {
		if t.Effect == nil {
			continue
		}
		if t.Effect.Verify == nil { // a VerifySubject is bound to a Verify by the root package
			return nil, fmt.Errorf("%w: %s has a side effect but no Verify", ErrInvalidTool, t.Name)
		}
		if !t.Effect.Reversible {
			continue
		}
		if t.Effect.Compensation == "" {
			return nil, fmt.Errorf("%w: %s is reversible but names no compensation tool", ErrInvalidTool, t.Name)
		}
		if _, ok := r.m[t.Effect.Compensation]; !ok {
			return nil, fmt.Errorf("%w: %s's compensation tool %s is not registered", ErrInvalidTool, t.Name, t.Effect.Compensation)
		}
		// Undoing must end: no tool is its own compensation, directly
		// or through others.
		for c, n := r.m[t.Effect.Compensation], 0; c != nil && n <= len(r.m); n++ {
			if c.Name == t.Name {
				return nil, fmt.Errorf("%w: %s is undone by itself (compensation %s)", ErrInvalidTool, t.Name, t.Effect.Compensation)
			}
			if c.Effect == nil || !c.Effect.Reversible {
				break
			}
			c = r.m[c.Effect.Compensation]
		}
	}
	return r, nil
}

// Systems returns the external systems the tools touch, each once,
// sorted: the circuit breakers a pipeline's calls pass. The caller must
// not change it.
func (r *Tools) Systems() []string {
	if r == nil {
		return nil
	}
	return r.systems
}

// Get returns a tool, or an error wrapping errUnknownTool.
func (r *Tools) Get(name string) (*salvagetype.Tool, error) {
	if r != nil {
		if t, ok := r.m[name]; ok {
			return t, nil
		}
	}
	return nil, fmt.Errorf("%w: %q", errUnknownTool, name)
}
