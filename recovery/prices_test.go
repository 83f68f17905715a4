package recovery

import (
	"testing"

	"github.com/salvagehq/salvage/salvagetype"
)

func TestPricesAndBudgets(t *testing.T) {
	t.Parallel()
	p := Prices{"big": {Prompt: 2.5, Completion: 10}}
	if got := p.CostMicros(&salvagetype.Usage{Model: "big", PromptTokens: 1000, CompletionTokens: 100}); got != 3500 {
		t.Fatalf("cost %d millionths; want 3500 (1000 x 2.5 + 100 x 10)", got)
	}
	if p.CostMicros(&salvagetype.Usage{Model: "other", PromptTokens: 1000}) != 0 || p.CostMicros(nil) != 0 {
		t.Fatal("an unpriced model costs nothing")
	}
	if (Prices{"m": {Prompt: -1}}).Validate() == nil {
		t.Fatal("a negative price must be refused")
	}
	b := &salvagetype.Budget{Tokens: 100, Cost: 0.004}
	for _, c := range []struct {
		s    salvagetype.Summary
		want bool
	}{
		{salvagetype.Summary{PromptTokens: 60, CompletionTokens: 40}, false},
		{salvagetype.Summary{PromptTokens: 60, CompletionTokens: 41}, true},
		{salvagetype.Summary{CostMicros: 4000}, false},
		{salvagetype.Summary{CostMicros: 4001}, true},
	} {
		if got := b.Exceeded(c.s); got != c.want {
			t.Errorf("Exceeded(%+v) = %v", c.s, got)
		}
	}
	var none *salvagetype.Budget
	if none.Exceeded(salvagetype.Summary{PromptTokens: 1 << 40}) || (&salvagetype.Budget{}).Exceeded(salvagetype.Summary{PromptTokens: 1 << 40}) {
		t.Fatal("no budget, or a zero one, caps nothing")
	}
}
