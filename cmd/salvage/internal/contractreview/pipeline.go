// Package contractreview is the contract-review demo pipeline: a contract
// is split into clauses, and each clause is scored by 11 specialist analyst
// agents against 12 risk categories through a model — 116 model calls per
// chunk, as in the production system the reference write-up describes.
package contractreview

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"unicode"

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

// ModelTool is the name the pipeline's agents call the model by.
const ModelTool = "model"

// systemPrompt tells the model the one shape of answer the agents read.
const systemPrompt = "You are a contract risk analyst. Answer with a single integer from 0 (no risk) to 10 (severe risk) and nothing else."

// New returns the pipeline calling model, a tool that takes a
// salvage.ChatRequest and answers a salvage.ChatResponse: chatmodel.New
// for an OpenAI-compatible API, or the simulated model. The pipeline calls
// it by the name "model" whatever its own name. Fallbacks, in order, take
// a call the model cannot take now (rate-limited, overloaded, its breaker
// open): they are named model-fallback-1, -2, …
func New(model salvage.Tool, fallbacks ...salvage.Tool) *salvage.Pipeline {
	model.Name = ModelTool
	m := chain{ModelTool}
	tools := []salvage.Tool{model}
	for i, f := range fallbacks {
		f.Name = fmt.Sprintf("%s-fallback-%d", ModelTool, i+1)
		m = append(m, f.Name)
		tools = append(tools, f)
	}
	analysts := make([]salvage.Agent, len(Analysts))
	for i, name := range Analysts {
		analysts[i] = m.analyst(name, coverage(i))
	}
	return &salvage.Pipeline{
		Name:  Name,
		Split: Split,
		Stages: []salvage.Stage{
			{Name: "classify", Agents: []salvage.Agent{m.classifier()}},
			{Name: "analyze", Agents: analysts},
			{Name: "synthesize", Agents: []salvage.Agent{m.synthesizer()}},
		},
		Tools:  tools,
		Result: result,
	}
}

// score makes one journaled model call through the turn and reads the
// answer as a score. An answer that is not one is asked again once, more
// firmly (a new call, journaled like the first); a second miss fails the
// chunk, quoting the answer.
func (m chain) score(ctx context.Context, t *salvage.Turn, prompt string) (int, error) {
	return m.ask(ctx, t, systemPrompt, prompt)
}

// chain is the model tools a call may go to, in order.
type chain []string

// call asks the first model of the chain that can answer now.
func (m chain) call(ctx context.Context, t *salvage.Turn, req salvage.ChatRequest) (json.RawMessage, error) {
	if len(m) == 1 {
		return t.Tool(ctx, m[0], req)
	}
	out, _, err := t.ToolWithFallback(ctx, m, req)
	return out, err
}

// ask is score with its own system prompt.
func (m chain) ask(ctx context.Context, t *salvage.Turn, system, prompt string) (int, error) {
	req := salvage.ChatRequest{Messages: []salvage.Message{{Role: "system", Content: system}, {Role: "user", Content: prompt}}, MaxTokens: 8}
	var answer string
	for try := range 2 {
		if try == 1 {
			req.Messages = append(req.Messages, salvage.Message{Role: "assistant", Content: answer},
				salvage.Message{Role: "user", Content: "Answer with only the integer, 0 to 10."})
		}
		out, err := m.call(ctx, t, req)
		if err != nil {
			return 0, err
		}
		var resp salvage.ChatResponse
		if err := json.Unmarshal(out, &resp); err != nil {
			return 0, salvage.Permanent(0, fmt.Errorf("model output: %w", err))
		}
		if s, ok := parseScore(resp.Content); ok {
			return s, nil
		}
		answer = resp.Content
	}
	return 0, salvage.Permanent(0, fmt.Errorf("the model answered %q, not a score from 0 to 10", clip(answer, 200)))
}

// parseScore reads the first integer in an answer, if it is 0 to 10.
func parseScore(answer string) (int, bool) {
	i := strings.IndexFunc(answer, unicode.IsDigit)
	if i < 0 {
		return 0, false
	}
	j := i
	for j < len(answer) && answer[j] >= '0' && answer[j] <= '9' {
		j++
	}
	n, err := strconv.Atoi(answer[i:j])
	if err != nil || n > 10 {
		return 0, false
	}
	return n, true
}

func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

func clauseOf(t *salvage.Turn) (Clause, error) {
	var c Clause
	if err := json.Unmarshal(t.Input, &c); err != nil {
		return c, salvage.Permanent(400, fmt.Errorf("clause input: %w", err))
	}
	return c, nil
}

var clauseTypes = []string{"obligation", "right", "definition", "condition", "remedy", "boilerplate"}

// classifyPrompt asks for a clause type by number.
var classifyPrompt = func() string {
	var b strings.Builder
	b.WriteString("You classify contract clauses. Answer with a single integer and nothing else:")
	for i, t := range clauseTypes {
		fmt.Fprintf(&b, " %d %s,", i, t)
	}
	return strings.TrimSuffix(b.String(), ",") + "."
}()

func (m chain) classifier() salvage.Agent {
	return salvage.Agent{Name: "clause-classifier", Run: func(ctx context.Context, t *salvage.Turn) (any, error) {
		c, err := clauseOf(t)
		if err != nil {
			return nil, err
		}
		s, err := m.ask(ctx, t, classifyPrompt, c.Text)
		if err != nil {
			return nil, err
		}
		return clauseTypes[s%len(clauseTypes)], nil
	}}
}

func (m chain) analyst(name string, categories []string) salvage.Agent {
	return salvage.Agent{Name: name, Run: func(ctx context.Context, t *salvage.Turn) (any, error) {
		c, err := clauseOf(t)
		if err != nil {
			return nil, err
		}
		scores := make([]Score, 0, len(categories))
		for _, cat := range categories {
			s, err := m.score(ctx, t, fmt.Sprintf("As the %s analyst, rate the %s risk of this clause.\n\n%s", name, cat, c.Text))
			if err != nil {
				return nil, err
			}
			scores = append(scores, Score{Analyst: name, Category: cat, Score: s})
		}
		// A reflection pass: the analyst reviews its own scores once.
		if _, err := m.score(ctx, t, fmt.Sprintf("As the %s analyst you scored this clause %v. Rate your overall concern.\n\n%s", name, scores, c.Text)); err != nil {
			return nil, err
		}
		return scores, nil
	}}
}

func (m chain) synthesizer() salvage.Agent {
	return salvage.Agent{Name: "synthesizer", Run: func(ctx context.Context, t *salvage.Turn) (any, error) {
		c, err := clauseOf(t)
		if err != nil {
			return nil, err
		}
		var total int
		for _, step := range []string{"merge", "rank", "summarize"} {
			s, err := m.score(ctx, t, fmt.Sprintf("Synthesis step %q: rate this clause's risk for the contract as a whole.\n\n%s", step, c.Text))
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
