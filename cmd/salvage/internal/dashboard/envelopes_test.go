package dashboard

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"reflect"
	"runtime"
	"testing"
	"time"

	"github.com/salvagehq/salvage"
)

// TestEnvelopeStatsMatchTheRecords: after any sequence of envelope writes
// and removals, the counts kept without the records equal those computed
// from every record (salvage.AutoRecoveryRate, the counts by status and
// category, depth, unacknowledged, oldest), and the event counts equal
// the events the writes made. Removals take a chunk's envelopes all at
// once, as retention does (its older envelopes settled first).
func TestEnvelopeStatsMatchTheRecords(t *testing.T) {
	t.Parallel()
	for seed := range uint64(12) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) { checkEnvelopeStats(t, seed) })
	}
}

func checkEnvelopeStats(t *testing.T, seed uint64) {
	rnd := rand.New(rand.NewPCG(seed, 7))
	statuses := []salvage.EnvelopeStatus{salvage.EnvelopeOpen, salvage.EnvelopeRecovering, salvage.EnvelopeResolved, salvage.EnvelopeSuperseded,
		salvage.EnvelopeEscalated, salvage.EnvelopeDeadEnd, salvage.EnvelopeAbandoned}
	categories := []salvage.Category{salvage.CategoryTransientNetwork, salvage.CategoryToolTimeout, salvage.CategoryCompensationNeeded, salvage.CategoryUnrecoverable}
	strategies := []salvage.Strategy{salvage.StrategyResume, salvage.StrategyCompensateAndAbandon, salvage.StrategyEscalate}
	base := time.Date(2026, 12, 7, 0, 0, 0, 0, time.UTC)

	x := newEnvelopeStats()
	x.update(salvage.Change[salvage.EnvelopeRecord]{CaughtUp: true})
	recs := map[string]salvage.EnvelopeRecord{}
	arrived := map[string]int{}
	outcomes := map[string]map[string]int{}
	put := func(r salvage.EnvelopeRecord) {
		prev, seen := recs[r.ID]
		if !seen {
			arrived[string(r.Category)]++
		}
		if r.Status.Final() && (!seen || prev.Status != r.Status) {
			if outcomes[string(r.Strategy)] == nil {
				outcomes[string(r.Strategy)] = map[string]int{}
			}
			outcomes[string(r.Strategy)][string(r.Status)]++
		}
		recs[r.ID] = r
		x.update(salvage.Change[salvage.EnvelopeRecord]{Key: r.ID, Value: r})
	}
	for op := range 400 {
		job, chunk := fmt.Sprintf("JOB%d", rnd.IntN(3)), rnd.IntN(6)
		if rnd.IntN(20) == 0 {
			for id, r := range recs {
				if r.Job == job && r.Chunk == chunk {
					delete(recs, id)
					x.update(salvage.Change[salvage.EnvelopeRecord]{Key: id, Deleted: true})
				}
			}
		} else {
			id := fmt.Sprintf("%s-%d-%d", job, chunk, rnd.IntN(3))
			r, ok := recs[id]
			if !ok {
				r = salvage.EnvelopeRecord{ID: id, Job: job, Chunk: chunk, Category: categories[rnd.IntN(len(categories))],
					Strategy: strategies[rnd.IntN(len(strategies))], CreatedAt: base.Add(time.Duration(rnd.Int64N(1e12)))}
				if rnd.IntN(10) == 0 {
					r.Stopped = "cancelled"
				}
			}
			r.Status = statuses[rnd.IntN(len(statuses))]
			r.Human = r.Human || rnd.IntN(8) == 0
			r.ResolvedBy = []string{"", "chunk", "alice"}[rnd.IntN(3)]
			r.Left = make([]salvage.LeftEffect, rnd.IntN(2))
			if rnd.IntN(4) == 0 {
				r.AckedBy = "bob"
			}
			put(r)
		}
		all := make([]salvage.EnvelopeRecord, 0, len(recs))
		for _, r := range recs {
			all = append(all, r)
		}
		want := envelopeCounts{total: len(all), byStatus: map[string]int{}, byCategory: map[string]int{},
			arrived: maps.Clone(arrived), outcomes: map[string]map[string]int{}, RecoveryStats: salvage.AutoRecoveryRate(all)}
		for s, m := range outcomes {
			want.outcomes[s] = maps.Clone(m)
		}
		for _, r := range all {
			want.byStatus[string(r.Status)]++
			want.byCategory[string(r.Category)]++
			if !r.Status.Open() {
				continue
			}
			want.depth++
			if want.oldest.IsZero() || r.CreatedAt.Before(want.oldest) {
				want.oldest = r.CreatedAt
			}
			if r.AckedBy == "" && (r.Status == salvage.EnvelopeEscalated || r.Category == salvage.CategoryCompensationNeeded) {
				want.unacknowledged++
			}
		}
		got := x.counts()
		if !got.oldest.IsZero() {
			got.oldest = got.oldest.UTC()
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("op %d: counts\n got %+v\nwant %+v", op, got, want)
		}
	}
}

// TestEnvelopeStatsForgetWhatARestartDidNotRedeliver: a watch that
// restarts redelivers every record that exists; a record it does not
// redeliver was removed while it was down, and its counts go, while the
// event counts stay. A record written live between two restarts counts.
func TestEnvelopeStatsForgetWhatARestartDidNotRedeliver(t *testing.T) {
	t.Parallel()
	x := newEnvelopeStats()
	rec := func(id string, chunk int, status salvage.EnvelopeStatus) salvage.Change[salvage.EnvelopeRecord] {
		return salvage.Change[salvage.EnvelopeRecord]{Key: id, Value: salvage.EnvelopeRecord{ID: id, Job: "J", Chunk: chunk, Category: salvage.CategoryToolTimeout,
			Strategy: salvage.StrategyResume, Status: status, CreatedAt: time.Unix(int64(chunk), 0)}}
	}
	caughtUp := salvage.Change[salvage.EnvelopeRecord]{CaughtUp: true}
	for i, id := range []string{"A", "B", "C"} {
		x.update(rec(id, i+1, salvage.EnvelopeOpen))
	}
	x.update(caughtUp)
	x.update(rec("D", 4, salvage.EnvelopeResolved)) // live, between restarts
	// The watch restarts: A, C and D are redelivered, B was removed.
	for i, id := range []string{"A", "C"} {
		x.update(rec(id, 2*i+1, salvage.EnvelopeOpen))
	}
	x.update(rec("D", 4, salvage.EnvelopeResolved))
	x.update(caughtUp)
	got := x.counts()
	if got.total != 3 || got.depth != 2 || got.byStatus["open"] != 2 || got.byStatus["resolved"] != 1 || got.DeadLettered != 3 || got.arrived[string(salvage.CategoryToolTimeout)] != 4 {
		t.Fatalf("after a restart that did not redeliver B: %+v", got)
	}
	// Another restart redelivers all three: nothing more goes.
	for _, c := range []salvage.Change[salvage.EnvelopeRecord]{rec("A", 1, salvage.EnvelopeOpen), rec("C", 3, salvage.EnvelopeOpen), rec("D", 4, salvage.EnvelopeResolved), caughtUp} {
		x.update(c)
	}
	if got := x.counts(); got.total != 3 || got.DeadLettered != 3 {
		t.Fatalf("after a full redelivery: %+v", got)
	}
}

// TestEnvelopeArrivalsPerMinute: the history's last hour of arrivals
// comes from the creation minutes of the envelopes seen, each once, a
// record's removal does not take its arrival back, and minutes out of the
// window are dropped.
func TestEnvelopeArrivalsPerMinute(t *testing.T) {
	t.Parallel()
	end := time.Date(2026, 12, 7, 10, 0, 0, 0, time.UTC)
	x := newEnvelopeStats()
	x.now = func() time.Time { return end }
	x.update(salvage.Change[salvage.EnvelopeRecord]{CaughtUp: true})
	for i, ago := range []time.Duration{30 * time.Second, 90 * time.Second, 59*time.Minute + 30*time.Second, 61 * time.Minute, 30 * time.Second} {
		x.update(salvage.Change[salvage.EnvelopeRecord]{Key: fmt.Sprint(i % 4), Value: salvage.EnvelopeRecord{ID: fmt.Sprint(i % 4), Status: salvage.EnvelopeOpen, CreatedAt: end.Add(-ago)}})
	}
	per := x.arrivalsPerMinute(end, 60)
	if per[59] != 1 || per[58] != 1 || per[0] != 1 || sum(per) != 3 {
		t.Fatalf("per minute %v: want one in the last, the one before and the first minute", per)
	}
	x.update(salvage.Change[salvage.EnvelopeRecord]{Key: "1", Deleted: true})
	if per := x.arrivalsPerMinute(end, 60); per[58] != 1 || sum(per) != 3 {
		t.Fatalf("after a removal, per minute %v", per)
	}
	// Three hours on, a new minute's arrival drops the minutes out of the
	// window: what is kept does not grow with the process's age.
	later := end.Add(3 * time.Hour)
	x.now = func() time.Time { return later }
	x.update(salvage.Change[salvage.EnvelopeRecord]{Key: "9", Value: salvage.EnvelopeRecord{ID: "9", Status: salvage.EnvelopeOpen, CreatedAt: later.Add(-time.Second)}})
	if len(x.arrivals) != 1 {
		t.Fatalf("minutes kept three hours on: %v, want only the latest", x.arrivals)
	}
}

func sum(ns []int) (n int) {
	for _, v := range ns {
		n += v
	}
	return n
}

// BenchmarkEnvelopeStatsMemory reports the heap envelopeStats keeps per
// envelope: 100,000 records, each on a chunk of its own, a fifth open (as
// salvage bench --only dashboard writes them).
func BenchmarkEnvelopeStatsMemory(b *testing.B) {
	const n = 100_000
	statuses := []salvage.EnvelopeStatus{salvage.EnvelopeDeadEnd, salvage.EnvelopeResolved, salvage.EnvelopeAbandoned, salvage.EnvelopeSuperseded, salvage.EnvelopeOpen}
	now := time.Now()
	for b.Loop() {
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		x := newEnvelopeStats()
		for i := range n {
			id := fmt.Sprintf("01K%023d", i)
			x.update(salvage.Change[salvage.EnvelopeRecord]{Key: id, Value: salvage.EnvelopeRecord{ID: id, Job: fmt.Sprintf("listing%04d", i/100), Chunk: i%100 + 1,
				Category: salvage.CategoryToolTimeout, Strategy: salvage.StrategyResume, Status: statuses[i%len(statuses)], CreatedAt: now}})
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/n, "B/envelope")
		runtime.KeepAlive(x)
	}
}
