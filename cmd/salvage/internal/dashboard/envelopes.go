package dashboard

import (
	"sync"
	"time"

	"github.com/salvagehq/salvage"
)

// envelopeIndex keeps every envelope record in memory, current through a
// watch on salvage_envelopes, and counts envelope events: each envelope
// once by the category it arrived with, and each move of an envelope into
// a final status by its strategy and that status. The counts only grow.
type envelopeIndex struct {
	mu         sync.Mutex
	recs       map[string]salvage.EnvelopeRecord
	byCategory map[string]int
	outcomes   map[string]map[string]int // strategy -> status -> n
	ready      chan struct{}
	once       sync.Once
}

func newEnvelopeIndex() *envelopeIndex {
	return &envelopeIndex{recs: map[string]salvage.EnvelopeRecord{}, byCategory: map[string]int{}, outcomes: map[string]map[string]int{}, ready: make(chan struct{})}
}

// update applies one envelope record change.
func (x *envelopeIndex) update(ch salvage.Change[salvage.EnvelopeRecord]) {
	if ch.CaughtUp {
		x.once.Do(func() { close(x.ready) })
		return
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	if ch.Deleted {
		delete(x.recs, ch.Key)
		return
	}
	r := ch.Value
	prev, seen := x.recs[ch.Key]
	if !seen {
		x.byCategory[string(r.Category)]++
	}
	if r.Status.Final() && (!seen || prev.Status != r.Status) {
		if x.outcomes[string(r.Strategy)] == nil {
			x.outcomes[string(r.Strategy)] = map[string]int{}
		}
		x.outcomes[string(r.Strategy)][string(r.Status)]++
	}
	x.recs[ch.Key] = r
}

// snapshot returns the records and copies of the event counts.
func (x *envelopeIndex) snapshot() ([]salvage.EnvelopeRecord, map[string]int, map[string]map[string]int) {
	select {
	case <-x.ready:
	case <-time.After(2 * time.Second):
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	recs := make([]salvage.EnvelopeRecord, 0, len(x.recs))
	for _, r := range x.recs {
		recs = append(recs, r)
	}
	cats := make(map[string]int, len(x.byCategory))
	for k, v := range x.byCategory {
		cats[k] = v
	}
	outs := make(map[string]map[string]int, len(x.outcomes))
	for s, m := range x.outcomes {
		outs[s] = map[string]int{}
		for k, v := range m {
			outs[s][k] = v
		}
	}
	return recs, cats, outs
}
