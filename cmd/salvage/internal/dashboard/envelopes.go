package dashboard

import (
	"encoding/json"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/salvagehq/salvage/kv"
)

// envelopeIndex keeps every envelope record in memory, current through a
// watch on salvage_envelopes, and counts envelope events: each envelope
// once by the category it arrived with, and each move of an envelope into
// a final status by its strategy and that status. The counts only grow.
type envelopeIndex struct {
	mu         sync.Mutex
	recs       map[string]kv.EnvelopeRecord
	byCategory map[string]int
	outcomes   map[string]map[string]int // strategy -> status -> n
	ready      chan struct{}
	once       sync.Once
}

func newEnvelopeIndex() *envelopeIndex {
	return &envelopeIndex{recs: map[string]kv.EnvelopeRecord{}, byCategory: map[string]int{}, outcomes: map[string]map[string]int{}, ready: make(chan struct{})}
}

// update applies one salvage_envelopes entry (guard keys are skipped).
func (x *envelopeIndex) update(e jetstream.KeyValueEntry) {
	if e == nil {
		x.once.Do(func() { close(x.ready) })
		return
	}
	if strings.HasPrefix(e.Key(), "chunkmsg.") {
		return
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	if e.Operation() != jetstream.KeyValuePut {
		delete(x.recs, e.Key())
		return
	}
	var r kv.EnvelopeRecord
	if json.Unmarshal(e.Value(), &r) != nil {
		return
	}
	prev, seen := x.recs[e.Key()]
	if !seen {
		x.byCategory[r.Category]++
	}
	if r.Final() && (!seen || prev.Status != r.Status) {
		if x.outcomes[r.Strategy] == nil {
			x.outcomes[r.Strategy] = map[string]int{}
		}
		x.outcomes[r.Strategy][r.Status]++
	}
	x.recs[e.Key()] = r
}

// snapshot returns the records and copies of the event counts.
func (x *envelopeIndex) snapshot() ([]kv.EnvelopeRecord, map[string]int, map[string]map[string]int) {
	select {
	case <-x.ready:
	case <-time.After(2 * time.Second):
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	recs := make([]kv.EnvelopeRecord, 0, len(x.recs))
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
