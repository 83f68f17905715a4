package recovery

import "github.com/salvagehq/salvage/kv"

// Tally is what a chunk's calls came to, counted from its journal rows:
// every row is one call (its retries are its attempts), and a row that
// records a call's success carries what it spent. Counted from the rows,
// it is the same whoever counts and however often a crash, a takeover, a
// redelivery or a replay made the chunk run: a call answered from the
// journal is the row already counted, a call made again after its row was
// lost is one row.
type Tally struct {
	Calls                          int
	PromptTokens, CompletionTokens int64
	CostMicros                     int64
}

// Add counts row, priced with prices.
func (t *Tally) Add(row kv.JournalRow, prices Prices) {
	t.Calls++
	if u := row.Usage; u != nil {
		t.PromptTokens += u.PromptTokens
		t.CompletionTokens += u.CompletionTokens
		t.CostMicros += prices.CostMicros(u)
	}
}

// Plus is t and o together.
func (t Tally) Plus(o Tally) Tally {
	return Tally{Calls: t.Calls + o.Calls, PromptTokens: t.PromptTokens + o.PromptTokens,
		CompletionTokens: t.CompletionTokens + o.CompletionTokens, CostMicros: t.CostMicros + o.CostMicros}
}

// Tally counts the rows' calls, tokens and cost at prices.
func (rows Rows) Tally(prices Prices) Tally {
	var t Tally
	for _, r := range rows {
		t.Add(r.JournalRow, prices)
	}
	return t
}

// Tally counts the rows of the epoch as this run knows them: those loaded
// and those written since.
func (r *Replay) Tally(prices Prices) Tally {
	r.mu.Lock()
	defer r.mu.Unlock()
	var t Tally
	for _, row := range r.rows {
		t.Add(row.JournalRow, prices)
	}
	return t
}
