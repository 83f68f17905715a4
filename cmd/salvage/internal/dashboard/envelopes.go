package dashboard

import (
	"hash/maphash"
	"math"
	"strconv"
	"sync"
	"time"

	"github.com/salvagehq/salvage"
)

// envelopeStats follows salvage_envelopes through a watch and keeps what
// the summary, the metrics and the history need, and no record: per
// envelope 8 bytes (envState), per chunk that was ever dead-lettered the
// fate the automatic recovery rate reads, and per open envelope its age
// and whether it waits for an acknowledgement: about 85 bytes an envelope
// in all, the maps' slack included (BenchmarkEnvelopeStatsMemory).
// Listings read pages of SALVAGE_INDEX instead (Client.EnvelopeList).
//
// It counts envelope events: each envelope once by the category it
// arrived with, and each move of an envelope into a final status by its
// strategy and that status. The counts only grow while the process runs.
type envelopeStats struct {
	mu   sync.Mutex
	seed maphash.Seed
	now  func() time.Time
	// statuses, categories and strategies number the names met.
	statuses, categories, strategies interned

	recs  map[uint64]envState // by hash of the envelope id
	open  map[uint64]openEnv  // the open ones (open, recovering, escalated)
	fates map[uint64]chunkFate
	// byStatus and byCategory count the records as they stand.
	byStatus, byCategory map[uint8]int
	// arrivals counts envelopes by creation minute (Unix minutes) over
	// the last arrivalWindow minutes, for the last hour of the history:
	// arrivals are events, which a record's removal does not take back.
	arrivals map[int64]int

	gens generations

	arrived  map[uint8]int           // category -> envelopes
	outcomes map[uint8]map[uint8]int // strategy -> status -> moves
}

// envState is what one envelope record contributes to the counts, kept
// so a change of the record or its removal takes back what it added,
// packed in 8 bytes: bits 0-48 a hash of its job and chunk, 49 the
// generation of the watch that last delivered it (see sweep), 50-53 its
// status, 54-57 its category, 58-61 its strategy (each a number from its
// interned names), 62 whether a person touched it, 63 whether it settles
// a stop or a rejection.
type envState uint64

const chunkBits = 49

func packState(chunk uint64, gen bool, status, category, strategy uint8, human, stopped bool) envState {
	s := chunk&(1<<chunkBits-1) | uint64(status&0xf)<<50 | uint64(category&0xf)<<54 | uint64(strategy&0xf)<<58
	if gen {
		s |= 1 << 49
	}
	if human {
		s |= 1 << 62
	}
	if stopped {
		s |= 1 << 63
	}
	return envState(s)
}

func (s envState) chunk() uint64   { return uint64(s) & (1<<chunkBits - 1) }
func (s envState) gen() bool       { return s&(1<<49) != 0 }
func (s envState) status() uint8   { return uint8(s>>50) & 0xf }
func (s envState) category() uint8 { return uint8(s>>54) & 0xf }
func (s envState) strategy() uint8 { return uint8(s>>58) & 0xf }
func (s envState) human() bool     { return s&(1<<62) != 0 }
func (s envState) stopped() bool   { return s&(1<<63) != 0 }

// openEnv is an open envelope: when it was created and whether a person
// must acknowledge it (an escalation or COMPENSATION_NEEDED nobody
// acknowledged).
type openEnv struct {
	created  int64
	needsAck bool
}

// chunkFate is what the automatic recovery rate needs of one chunk: how
// many of its envelope records stand (n, and those settling a stop or a
// rejection apart), how many of them a person touched, and whether its
// latest envelope recovered without one.
type chunkFate struct {
	latestAt           int64
	latest             uint32 // the low bits of its id's hash
	n, humans, stopped uint16
	recovered          bool
}

// interned numbers the names met of one kind (statuses, categories or
// strategies), at most internedMax of them.
type interned struct {
	ids   map[string]uint8
	names []string
}

const internedMax = 16

func (n *interned) id(s string) uint8 {
	if id, ok := n.ids[s]; ok {
		return id
	}
	if n.ids == nil {
		n.ids = map[string]uint8{}
	}
	if len(n.names) >= internedMax-1 {
		// Only forged records spell that many: the last id stands for
		// all the rest.
		s = "other"
		if id, ok := n.ids[s]; ok {
			return id
		}
	}
	id := uint8(len(n.names))
	n.ids[s] = id
	n.names = append(n.names, s)
	return id
}

// arrivalWindow is how many minutes of arrivals are kept: the history's
// hour and some.
const arrivalWindow = 120

func newEnvelopeStats() *envelopeStats {
	return &envelopeStats{seed: maphash.MakeSeed(), now: time.Now, recs: map[uint64]envState{}, open: map[uint64]openEnv{}, fates: map[uint64]chunkFate{},
		byStatus: map[uint8]int{}, byCategory: map[uint8]int{}, arrivals: map[int64]int{},
		arrived: map[uint8]int{}, outcomes: map[uint8]map[uint8]int{}, gens: newGenerations()}
}

// update applies one envelope record change.
func (x *envelopeStats) update(ch salvage.Change[salvage.EnvelopeRecord]) {
	x.mu.Lock()
	defer x.mu.Unlock()
	if ch.CaughtUp {
		x.sweep()
		return
	}
	h := maphash.String(x.seed, ch.Key)
	prev, seen := x.recs[h]
	if seen {
		x.take(h, prev)
	}
	if ch.Deleted {
		delete(x.recs, h)
		return
	}
	r := ch.Value
	st := packState(x.chunkHash(r.Job, r.Chunk), x.gens.current(), x.statuses.id(string(r.Status)), x.categories.id(string(r.Category)), x.strategies.id(string(r.Strategy)),
		r.Human || r.Replays > 0, r.Stopped != "" || r.Rejected)
	if !seen {
		x.arrived[st.category()]++
		x.arrive(r.CreatedAt)
	}
	if r.Status.Final() && (!seen || prev.status() != st.status()) {
		if x.outcomes[st.strategy()] == nil {
			x.outcomes[st.strategy()] = map[uint8]int{}
		}
		x.outcomes[st.strategy()][st.status()]++
	}
	x.recs[h] = st
	x.byStatus[st.status()]++
	x.byCategory[st.category()]++
	if r.Status.Open() {
		x.open[h] = openEnv{created: r.CreatedAt.UnixNano(),
			needsAck: r.AckedBy == "" && (r.Status == salvage.EnvelopeEscalated || r.Category == salvage.CategoryCompensationNeeded)}
	}
	f := x.fates[st.chunk()]
	switch {
	case st.stopped():
		f.stopped = incr(f.stopped)
	default:
		f.n = incr(f.n)
		if st.human() {
			f.humans = incr(f.humans)
		}
		// The latest envelope of the chunk carries its fate: by creation,
		// then by id (its hash, within this process).
		if at, id := r.CreatedAt.UnixNano(), uint32(h); f.n == 1 || id == f.latest || at > f.latestAt || (at == f.latestAt && id > f.latest) {
			f.latest, f.latestAt = id, at
			f.recovered = (r.Status == salvage.EnvelopeResolved && r.ResolvedBy == "chunk") || (r.Status == salvage.EnvelopeAbandoned && len(r.Left) == 0)
		}
	}
	x.fates[st.chunk()] = f
}

// sweep ends a generation of the watch (see generations): the counts of
// a record it did not deliver again are taken back. O(records), once per
// (re)start.
func (x *envelopeStats) sweep() {
	for h, st := range x.recs {
		if x.gens.stale(st.gen()) {
			x.take(h, st)
			delete(x.recs, h)
		}
	}
	x.gens.end()
}

// take removes what the record of hash h, in state st, added to the
// counts (the event counts excepted).
func (x *envelopeStats) take(h uint64, st envState) {
	decr(x.byStatus, st.status())
	decr(x.byCategory, st.category())
	delete(x.open, h)
	f := x.fates[st.chunk()]
	if st.stopped() {
		f.stopped = decrCount(f.stopped)
	} else {
		f.n = decrCount(f.n)
		if st.human() {
			f.humans = decrCount(f.humans)
		}
	}
	// A chunk's latest envelope that expires leaves the fate it carried:
	// its older ones were settled before it, so they expire first.
	if f.n == 0 && f.stopped == 0 {
		delete(x.fates, st.chunk())
		return
	}
	x.fates[st.chunk()] = f
}

// incr and decrCount move a chunk's count, stuck at its bounds: only
// forged records put 65,535 envelopes on one chunk.
func incr(n uint16) uint16 { return n + min(math.MaxUint16-n, 1) }

func decrCount(n uint16) uint16 { return n - min(n, 1) }

func decr[K comparable](m map[K]int, k K) {
	if m[k] <= 1 {
		delete(m, k)
		return
	}
	m[k]--
}

func (x *envelopeStats) chunkHash(job string, chunk int) uint64 {
	var h maphash.Hash
	h.SetSeed(x.seed)
	h.WriteString(job)
	h.WriteByte('.')
	h.WriteString(strconv.Itoa(chunk))
	return h.Sum64()
}

// envelopeCounts is what the summary takes from envelopeStats.
type envelopeCounts struct {
	total                 int
	byStatus, byCategory  map[string]int
	depth, unacknowledged int
	oldest                time.Time // of the open ones; zero when none
	arrived               map[string]int
	outcomes              map[string]map[string]int
	salvage.RecoveryStats
}

// counts returns the counts as they stand: O(open envelopes and chunks
// dead-lettered), no record read.
func (x *envelopeStats) counts() envelopeCounts {
	x.gens.wait()
	x.mu.Lock()
	defer x.mu.Unlock()
	status, category, strategy := x.statuses.names, x.categories.names, x.strategies.names
	out := envelopeCounts{total: len(x.recs), byStatus: map[string]int{}, byCategory: map[string]int{}, depth: len(x.open),
		arrived: map[string]int{}, outcomes: map[string]map[string]int{}}
	for id, n := range x.byStatus {
		out.byStatus[status[id]] = n
	}
	for id, n := range x.byCategory {
		out.byCategory[category[id]] = n
	}
	for id, n := range x.arrived {
		out.arrived[category[id]] = n
	}
	for s, m := range x.outcomes {
		byStatus := map[string]int{}
		for id, n := range m {
			byStatus[status[id]] = n
		}
		out.outcomes[strategy[s]] = byStatus
	}
	var oldest int64
	for _, o := range x.open {
		if oldest == 0 || o.created < oldest {
			oldest = o.created
		}
		if o.needsAck {
			out.unacknowledged++
		}
	}
	if oldest != 0 {
		out.oldest = time.Unix(0, oldest)
	}
	out.RecoveryStats = salvage.RecoveryStats{Rate: 1}
	for _, f := range x.fates {
		if f.n <= 0 {
			continue
		}
		out.DeadLettered++
		if f.humans == 0 && f.stopped == 0 && f.recovered {
			out.Recovered++
		}
	}
	if out.DeadLettered > 0 {
		out.Rate = float64(out.Recovered) / float64(out.DeadLettered)
	}
	return out
}

// arrivalsPerMinute counts the envelopes created in each of the minutes
// minutes before end (a minute boundary), oldest first.
func (x *envelopeStats) arrivalsPerMinute(end time.Time, minutes int) []int {
	x.gens.wait()
	x.mu.Lock()
	defer x.mu.Unlock()
	per := make([]int, minutes)
	last := end.Unix()/60 - 1
	for m, n := range x.arrivals {
		if back := last - m; back >= 0 && back < int64(minutes) {
			per[minutes-1-int(back)] += n
		}
	}
	return per
}

// arrive counts an envelope created at t, when that is within the last
// arrivalWindow minutes; a minute's first arrival drops the minutes that
// fell out of the window, so the map holds arrivalWindow minutes at most.
func (x *envelopeStats) arrive(t time.Time) {
	m, now := t.Unix()/60, x.now().Unix()/60
	if m <= now-arrivalWindow || m > now {
		return
	}
	if _, ok := x.arrivals[m]; !ok {
		for old := range x.arrivals {
			if old <= now-arrivalWindow {
				delete(x.arrivals, old)
			}
		}
	}
	x.arrivals[m]++
}
