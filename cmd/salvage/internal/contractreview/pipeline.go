// Package contractreview is the contract-review demo pipeline: a contract
// is split into clauses, and each clause is scored by 11 specialist analyst
// agents against 12 risk categories through a model — 116 model calls per
// chunk, as in the production system the reference write-up describes.
package contractreview

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/salvagehq/salvage"
)

// Name is the pipeline's name: jobs go to salvage.jobs.contract-review.
const Name = "contract-review"

// CallsPerChunk is how many model calls one chunk makes when nothing fails:
// 1 to classify the clause, 101 category scores and 11 reflections by the
// analysts, 3 to synthesise.
const CallsPerChunk = 116

// Categories are the risk categories clauses are scored against.
var Categories = []string{
	"liability", "indemnification", "termination", "payment", "confidentiality", "data-protection",
	"intellectual-property", "warranties", "dispute-resolution", "compliance", "force-majeure", "assignment",
}

// Analysts are the specialist agents of the analysis stage.
var Analysts = []string{
	"commercial", "litigation", "privacy", "ip", "finance", "regulatory",
	"employment", "insurance", "tax", "operations", "governance",
}

// coverage returns the categories analyst i scores: ten for the first two
// analysts, nine for the others, each starting at its own category — 101
// scores in all, so no category goes unreviewed and none is scored by all.
func coverage(i int) []string {
	n := 9
	if i < 2 {
		n = 10
	}
	out := make([]string, n)
	for j := range n {
		out[j] = Categories[(i+j)%len(Categories)]
	}
	return out
}

// Model is what the pipeline needs from a language model.
type Model interface {
	Score(ctx context.Context, key, prompt string) (int, error)
}

// Input is the job input: {"text": "<contract>"}.
type Input struct {
	Text string `json:"text"`
}

// Clause is one chunk's input.
type Clause struct {
	Index   int    `json:"index"`
	Heading string `json:"heading,omitempty"`
	Text    string `json:"text"`
}

// Score is one analyst's score of one category.
type Score struct {
	Analyst  string `json:"analyst"`
	Category string `json:"category"`
	Score    int    `json:"score"`
}

// Finding is what a finished chunk publishes on SALVAGE_RESULTS.
type Finding struct {
	Clause       int            `json:"clause"`
	Heading      string         `json:"heading,omitempty"`
	ClauseType   string         `json:"clause_type"`
	Risk         string         `json:"risk"`
	CategoryRisk map[string]int `json:"category_risk"`
	Scores       []Score        `json:"scores"`
	Summary      string         `json:"summary"`
}

// ModelTool is the model as a tool: a pure read, journaled like every
// call so a resumed chunk never pays for a completion twice.
func ModelTool(model Model) salvage.Tool {
	return salvage.Tool{Name: "model", System: "model", Call: func(ctx context.Context, c salvage.ToolCall) (salvage.ToolResult, error) {
		var in modelInput
		if err := json.Unmarshal(c.Input, &in); err != nil {
			return salvage.ToolResult{}, salvage.Permanent(400, err)
		}
		s, err := model.Score(ctx, c.IdempotencyKey, in.Prompt)
		if err != nil {
			return salvage.ToolResult{}, err
		}
		out, err := json.Marshal(modelOutput{Score: s})
		return salvage.ToolResult{Output: out}, err
	}}
}

type modelInput struct {
	Prompt string `json:"prompt"`
}

type modelOutput struct {
	Score int `json:"score"`
}

// New returns the pipeline calling model.
func New(model Model) *salvage.Pipeline {
	analysts := make([]salvage.Agent, len(Analysts))
	for i, name := range Analysts {
		analysts[i] = analyst(name, coverage(i))
	}
	return &salvage.Pipeline{
		Name:  Name,
		Split: Split,
		Stages: []salvage.Stage{
			{Name: "classify", Agents: []salvage.Agent{classifier()}},
			{Name: "analyze", Agents: analysts},
			{Name: "synthesize", Agents: []salvage.Agent{synthesizer()}},
		},
		Tools:  []salvage.Tool{ModelTool(model)},
		Result: result,
	}
}

// score makes one journaled model call through the turn.
func score(ctx context.Context, t *salvage.Turn, prompt string) (int, error) {
	out, err := t.Tool(ctx, "model", modelInput{Prompt: prompt})
	if err != nil {
		return 0, err
	}
	var o modelOutput
	if err := json.Unmarshal(out, &o); err != nil {
		return 0, salvage.Permanent(0, fmt.Errorf("model output: %w", err))
	}
	return o.Score, nil
}

func clauseOf(t *salvage.Turn) (Clause, error) {
	var c Clause
	if err := json.Unmarshal(t.Input, &c); err != nil {
		return c, salvage.Permanent(400, fmt.Errorf("clause input: %w", err))
	}
	return c, nil
}

var clauseTypes = []string{"obligation", "right", "definition", "condition", "remedy", "boilerplate"}

func classifier() salvage.Agent {
	return salvage.Agent{Name: "clause-classifier", Run: func(ctx context.Context, t *salvage.Turn) (any, error) {
		c, err := clauseOf(t)
		if err != nil {
			return nil, err
		}
		s, err := score(ctx, t, "classify: "+c.Text)
		if err != nil {
			return nil, err
		}
		return clauseTypes[s%len(clauseTypes)], nil
	}}
}

func analyst(name string, categories []string) salvage.Agent {
	return salvage.Agent{Name: name, Run: func(ctx context.Context, t *salvage.Turn) (any, error) {
		c, err := clauseOf(t)
		if err != nil {
			return nil, err
		}
		scores := make([]Score, 0, len(categories))
		for _, cat := range categories {
			s, err := score(ctx, t, fmt.Sprintf("%s analyst, %s risk: %s", name, cat, c.Text))
			if err != nil {
				return nil, err
			}
			scores = append(scores, Score{Analyst: name, Category: cat, Score: s})
		}
		// A reflection pass: the analyst reviews its own scores once.
		if _, err := score(ctx, t, fmt.Sprintf("%s analyst, reflect on %v", name, scores)); err != nil {
			return nil, err
		}
		return scores, nil
	}}
}

func synthesizer() salvage.Agent {
	return salvage.Agent{Name: "synthesizer", Run: func(ctx context.Context, t *salvage.Turn) (any, error) {
		c, err := clauseOf(t)
		if err != nil {
			return nil, err
		}
		var total int
		for _, step := range []string{"merge", "rank", "summarize"} {
			s, err := score(ctx, t, step+": "+c.Text)
			if err != nil {
				return nil, err
			}
			total += s
		}
		return fmt.Sprintf("clause %d reviewed by %d analysts; synthesis score %d/30", c.Index, len(Analysts), total), nil
	}}
}

// result assembles the finding from the stage outputs.
func result(input json.RawMessage, outs []salvage.StageOutput) (json.RawMessage, error) {
	var c Clause
	if err := json.Unmarshal(input, &c); err != nil {
		return nil, err
	}
	f := Finding{Clause: c.Index, Heading: c.Heading, CategoryRisk: map[string]int{}}
	for _, o := range outs {
		var err error
		switch o.Stage {
		case 1:
			err = json.Unmarshal(o.Output, &f.ClauseType)
		case 2:
			var s []Score
			if err = json.Unmarshal(o.Output, &s); err == nil {
				f.Scores = append(f.Scores, s...)
			}
		case 3:
			err = json.Unmarshal(o.Output, &f.Summary)
		}
		if err != nil {
			return nil, fmt.Errorf("stage %d output of %s: %w", o.Stage, o.Agent, err)
		}
	}
	worst := 0
	for _, s := range f.Scores {
		f.CategoryRisk[s.Category] = max(f.CategoryRisk[s.Category], s.Score)
		worst = max(worst, s.Score)
	}
	switch {
	case worst >= 9:
		f.Risk = "high"
	case worst >= 6:
		f.Risk = "medium"
	default:
		f.Risk = "low"
	}
	return json.Marshal(f)
}

// Split turns {"text": …} into one chunk per clause: paragraphs separated
// by blank lines, a short heading line kept with the paragraph after it.
func Split(raw json.RawMessage) ([]json.RawMessage, error) {
	var in Input
	if err := json.Unmarshal(raw, &in); err != nil {
		return nil, fmt.Errorf("%w: contract-review takes {\"text\": \"...\"}: %w", salvage.ErrBadInput, err)
	}
	if strings.TrimSpace(in.Text) == "" {
		return nil, fmt.Errorf("%w: contract text is empty", salvage.ErrBadInput)
	}
	var out []json.RawMessage
	var heading string
	for _, para := range strings.Split(strings.ReplaceAll(in.Text, "\r\n", "\n"), "\n\n") {
		para = strings.TrimSpace(para)
		if para == "" {
			continue
		}
		if isHeading(para) {
			heading = para
			continue
		}
		c := Clause{Index: len(out) + 1, Heading: heading, Text: para}
		heading = ""
		data, err := json.Marshal(c)
		if err != nil {
			return nil, err
		}
		out = append(out, data)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%w: contract has no clauses", salvage.ErrBadInput)
	}
	return out, nil
}

// isHeading is a short single line without a full stop.
func isHeading(p string) bool {
	return !strings.Contains(p, "\n") && len(p) < 80 && !strings.HasSuffix(p, ".")
}
