package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"slices"
	"sync"
	"syscall"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/spf13/pflag"

	"github.com/salvagehq/salvage"
	"github.com/salvagehq/salvage/cmd/salvage/internal/contractreview"
	"github.com/salvagehq/salvage/cmd/salvage/internal/demo"
	"github.com/salvagehq/salvage/cmd/salvage/internal/sim"
	"github.com/salvagehq/salvage/cmd/salvage/internal/simmodel"
	"github.com/salvagehq/salvage/natsconf"
)

// Crash runs feed the workers jobs of this many chunks, enough for the
// kills to land on running chunks from start to end.
const (
	crashJobs      = 4
	crashJobChunks = 2_000
	// crashSettle is how long the re-made calls of the last resumed chunk
	// are given before the model's counts are read.
	crashSettle = 3 * time.Second
	// crashResumeWait bounds the wait for the last killed chunk to resume.
	crashResumeWait = 3 * time.Minute
)

// crashRow reports SIGKILLs of worker processes.
type crashRow struct {
	SyncInterval string        `json:"sync_interval"`
	AckWait      time.Duration `json:"ack_wait_ns"`
	Workers      int           `json:"workers"`
	Kills        int           `json:"kills"`
	// Chunks is how many chunks the killed workers held, all resumed.
	Chunks int `json:"chunks_resumed"`
	// P50, P99 and Max are over kills: from the SIGKILL to the last of
	// the victim's chunks running again in another worker.
	P50 time.Duration `json:"p50_ns"`
	P99 time.Duration `json:"p99_ns"`
	Max time.Duration `json:"max_ns"`
	// Relost counts kills with a chunk whose first redelivery went to a
	// worker killed in turn before it took the chunk (it then waited a
	// second AckWait); CleanP99 leaves those kills out.
	Relost   int           `json:"kills_relost"`
	CleanP99 time.Duration `json:"p99_without_relost_ns"`
	// Requests and Unique count the model's requests and distinct calls
	// (idempotency keys); the difference was made twice.
	Requests     int     `json:"model_requests"`
	Unique       int     `json:"model_calls"`
	TwicePerKill float64 `json:"calls_made_twice_per_kill"`
	// InFlightBound is what a victim could have had in flight at most:
	// its chunks times the widest stage's agents, per kill.
	InFlightBound float64 `json:"in_flight_bound_per_kill"`
}

// verdict holds the resume to AckWait: a survivor takes a dead holder's
// chunks over once their lease lapses, before the server would redeliver.
func (c crashRow) verdict() string {
	return fmt.Sprintf("p99 < AckWait, only calls in flight: %s",
		verdict(c.P99 < c.AckWait && c.TwicePerKill <= c.InFlightBound))
}

// modelCounter counts the model requests of every worker, by idempotency
// key.
type modelCounter struct {
	mu       sync.Mutex
	requests int
	keys     map[string]int
}

func (m *modelCounter) wrap(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost && r.URL.Path == "/v1/chat/completions" {
			m.mu.Lock()
			m.requests++
			m.keys[r.Header.Get("Idempotency-Key")]++
			m.mu.Unlock()
		}
		h.ServeHTTP(w, r)
	})
}

func (m *modelCounter) counts() (requests, unique int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.requests, len(m.keys)
}

// crashKill is one SIGKILL and the chunks its victim held.
type crashKill struct {
	at      time.Time
	victim  string
	held    int
	resumed int
	last    time.Duration
	// relost: a chunk of this kill lost its redelivery to a later kill.
	relost bool
}

// chunkView is what the crash run reads of a checkpoint (docs/contract.md: bucket
// salvage_checkpoints).
type chunkView struct {
	Status     string `json:"status"`
	ClaimedBy  string `json:"claimed_by"`
	Deliveries uint64 `json:"deliveries"`
}

// pendingChunk is a killed worker's chunk not yet running elsewhere.
type pendingChunk struct {
	kill *crashKill
	// deliveries is the chunk's delivery count when it was killed.
	deliveries uint64
}

func (b *bench) crash(ctx context.Context) (crashRow, error) {
	var o demo.Opts
	o.Run.DemoPipelines = true
	o.Run.Register(pflag.NewFlagSet("bench", pflag.ContinueOnError), simmodel.Config{Seed: 1})
	o.Workers, o.Sync = b.o.workers, natsconf.SyncIntervalString(natsconf.DefaultServerConfig().SyncInterval)
	row := crashRow{SyncInterval: o.Sync, AckWait: o.Run.AckWait, Workers: o.Workers}

	counter, simURL, closeSim, err := countedModel()
	if err != nil {
		return row, err
	}
	defer closeSim()
	o.Run.SimURL = simURL

	d, err := b.e.StartDeployment(ctx, &o, b.log)
	if err != nil {
		return row, err
	}
	defer d.Close()
	cps, err := d.JS.KeyValue(ctx, "salvage_checkpoints")
	if err != nil {
		return row, err
	}
	watch, err := cps.WatchAll(ctx, jetstream.UpdatesOnly())
	if err != nil {
		return row, err
	}
	defer func() { _ = watch.Stop() }()

	book := &crashBook{running: map[string]chunkView{}, pending: map[string]pendingChunk{}}
	go book.follow(watch)

	input := contractreview.Input{Text: contractreview.Contract(crashJobChunks, 1)}
	var jobs []string
	for range crashJobs {
		id, err := d.Client.JobSubmit(ctx, contractreview.Name, input, nil)
		if err != nil {
			return row, err
		}
		jobs = append(jobs, id)
	}
	b.log.Info().Int("kills", b.o.kills).Dur("every_ms", b.o.killEvery).Msg("crash: killing worker processes")
	kills, err := b.killWorkers(ctx, o, d, book)
	if err != nil {
		return row, err
	}
	b.log.Info().Msg("crash: waiting for the last killed chunks to resume")
	deadline := time.Now().Add(crashResumeWait)
	for {
		left := book.left()
		if left == 0 {
			break
		}
		if time.Now().After(deadline) {
			return row, fmt.Errorf("%d killed chunks did not resume within %s", left, crashResumeWait)
		}
		time.Sleep(100 * time.Millisecond)
	}
	time.Sleep(crashSettle)
	row.Requests, row.Unique = counter.counts()
	for _, id := range jobs {
		if _, err := d.Client.JobCancel(ctx, id, "salvage bench"); err != nil {
			b.log.Warn().Err(err).Str("job_id", id).Msg("cancel bench job")
		}
	}

	book.mu.Lock()
	defer book.mu.Unlock()
	err = summarizeKills(&row, kills)
	return row, err
}

// killWorkers SIGKILLs a live worker of d holding running chunks every
// --kill-every, --kills times, each time starting another in its place,
// and returns what book says each kill left.
func (b *bench) killWorkers(ctx context.Context, o demo.Opts, d *demo.Deployment, book *crashBook) ([]*crashKill, error) {
	var kills []*crashKill
	next := len(d.Workers)
	for len(kills) < b.o.kills {
		select {
		case <-ctx.Done():
			return kills, ctx.Err()
		case <-time.After(b.o.killEvery):
		}
		// The victim: a live worker holding running chunks.
		holders := book.holders()
		var candidates []*demo.Worker
		for _, w := range d.Workers {
			if w.Cmd.ProcessState == nil && len(holders[w.ID]) > 0 {
				candidates = append(candidates, w)
			}
		}
		if len(candidates) == 0 {
			continue
		}
		victim := candidates[rand.N(len(candidates))]
		k, err := book.kill(victim, holders[victim.ID])
		if err != nil {
			return kills, err
		}
		kills = append(kills, k)
		_ = victim.Cmd.Wait()
		next++
		w, err := b.e.StartWorker(ctx, o, d.URL, fmt.Sprintf("bench-w%d", next))
		if w != nil {
			d.Workers = append(d.Workers, w)
		}
		if err != nil {
			return kills, err
		}
	}
	return kills, nil
}

// countedModel serves the simulated model on a loopback port, counting
// each request by its idempotency key: what tells a call made twice.
func countedModel() (*modelCounter, string, func(), error) {
	model, err := simmodel.New(simmodel.Config{Seed: 1, Latency: criticalLatency})
	if err != nil {
		return nil, "", nil, err
	}
	counter := &modelCounter{keys: map[string]int{}}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, "", nil, err
	}
	hs := &http.Server{Handler: counter.wrap(sim.Handler(sim.NewState(sim.Config{}), model)), ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = hs.Serve(ln) }()
	return counter, "http://" + ln.Addr().String(), func() { _ = hs.Close() }, nil
}

// summarizeKills fills row's latencies from the kills (with the book's
// lock held: its follower writes them).
func summarizeKills(row *crashRow, kills []*crashKill) error {
	lat := make([]time.Duration, 0, len(kills))
	var clean []time.Duration
	for _, k := range kills {
		row.Chunks += k.resumed
		if k.resumed > 0 {
			lat = append(lat, k.last)
			if !k.relost {
				clean = append(clean, k.last)
			} else {
				row.Relost++
			}
		}
	}
	slices.Sort(clean)
	row.CleanP99 = percentile(clean, 0.99)
	if len(lat) == 0 {
		return errors.New("no kill interrupted a running chunk")
	}
	slices.Sort(lat)
	row.Kills = len(kills)
	row.P50, row.P99, row.Max = percentile(lat, 0.50), percentile(lat, 0.99), lat[len(lat)-1]
	row.TwicePerKill = float64(row.Requests-row.Unique) / float64(row.Kills)
	row.InFlightBound = float64(row.Chunks) * float64(len(contractreview.Analysts)) / float64(row.Kills)
	return nil
}

// crashBook follows the checkpoints during the crash row: which chunks
// run on which worker, and which a kill interrupted until another worker
// takes them (the kill's latency then).
type crashBook struct {
	mu sync.Mutex
	// running holds the chunks whose latest checkpoint says running: the
	// victims are picked among their holders.
	running map[string]chunkView
	pending map[string]pendingChunk
}

// follow reads the checkpoints' updates until the watch stops.
func (c *crashBook) follow(watch jetstream.KeyWatcher) {
	for e := range watch.Updates() {
		if e == nil || e.Operation() != jetstream.KeyValuePut {
			continue
		}
		var v chunkView
		if json.Unmarshal(e.Value(), &v) != nil {
			continue
		}
		c.mu.Lock()
		if v.Status == string(salvage.ChunkRunning) {
			c.running[e.Key()] = v
		} else {
			delete(c.running, e.Key())
		}
		switch p, ok := c.pending[e.Key()]; {
		case !ok:
		case v.Status == string(salvage.ChunkRunning) && v.ClaimedBy != p.kill.victim:
			p.kill.last = max(p.kill.last, time.Since(p.kill.at))
			p.kill.resumed++
			if v.Deliveries > p.deliveries+1 {
				// A redelivery in between was lost too: the worker it
				// went to was killed before it took the chunk.
				p.kill.relost = true
			}
			delete(c.pending, e.Key())
		case v.ClaimedBy == p.kill.victim && v.Status != string(salvage.ChunkRunning):
			// The victim's last write landed as it was killed: the chunk
			// was over, not interrupted.
			p.kill.held--
			delete(c.pending, e.Key())
		}
		c.mu.Unlock()
	}
}

// holders maps each worker to the running chunks it holds that no kill
// has interrupted yet.
func (c *crashBook) holders() map[string][]string {
	c.mu.Lock()
	defer c.mu.Unlock()
	holders := map[string][]string{}
	for key, v := range c.running {
		if _, ok := c.pending[key]; !ok {
			holders[v.ClaimedBy] = append(holders[v.ClaimedBy], key)
		}
	}
	return holders
}

// kill SIGKILLs victim and marks the chunks it held (keys) interrupted.
func (c *crashBook) kill(victim *demo.Worker, keys []string) (*crashKill, error) {
	k := &crashKill{victim: victim.ID}
	c.mu.Lock()
	defer c.mu.Unlock()
	k.at = time.Now()
	if err := victim.Cmd.Process.Signal(syscall.SIGKILL); err != nil {
		return nil, err
	}
	for _, key := range keys {
		if v, ok := c.running[key]; ok && v.ClaimedBy == victim.ID {
			c.pending[key] = pendingChunk{kill: k, deliveries: v.Deliveries}
			k.held++
		}
	}
	return k, nil
}

// left counts the interrupted chunks no other worker has taken yet.
func (c *crashBook) left() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.pending)
}

// percentile is the nearest-rank percentile of sorted.
func percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(float64(len(sorted))*p+0.999999) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}
