package recovery

import (
	"fmt"
	"math"

	"github.com/salvagehq/salvage/salvagetype"
)

// Prices maps model names (as a call's Usage reports them) to prices. A
// model not listed costs nothing: its tokens still count against a token
// budget.
type Prices map[string]salvagetype.Price

// priceMax bounds a price per million tokens.
const priceMax = 1_000_000

// Validate reports a price that is not a number from 0 to priceMax.
func (p Prices) Validate() error {
	for model, pr := range p {
		for _, v := range []float64{pr.Prompt, pr.Completion} {
			if !(v >= 0 && v <= priceMax) { // NaN fails both
				return fmt.Errorf("recovery: price of %q must be a number from 0 to %d per million tokens, not %v", model, priceMax, v)
			}
		}
	}
	return nil
}

// CostMicros is what u cost, in millionths of the currency.
func (p Prices) CostMicros(u *salvagetype.Usage) int64 {
	if u == nil {
		return 0
	}
	pr, ok := p[u.Model]
	if !ok {
		return 0
	}
	// Per million tokens, in millionths: the factors cancel.
	return int64(math.Round(float64(u.PromptTokens)*pr.Prompt + float64(u.CompletionTokens)*pr.Completion))
}
