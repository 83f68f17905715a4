package salvage_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/salvagehq/salvage"
	"github.com/salvagehq/salvage/salvagetest"
)

// tenantWork is a pipeline whose chunks note, per tenant, how many run at
// once (the tenant comes from metadata "customer", TenantFrom). A chunk
// of a tenant in gated waits until the gate is closed.
type tenantWork struct {
	mu      sync.Mutex
	running map[string]int
	most    map[string]int
	started map[string]int
	gated   map[string]chan struct{}
	work    time.Duration
}

func newTenantWork(work time.Duration) *tenantWork {
	return &tenantWork{running: map[string]int{}, most: map[string]int{}, started: map[string]int{}, gated: map[string]chan struct{}{}, work: work}
}

func (w *tenantWork) gate(tenant string) chan struct{} {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.gated[tenant] = make(chan struct{})
	return w.gated[tenant]
}

func (w *tenantWork) count(tenant string) (running, most, started int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.running[tenant], w.most[tenant], w.started[tenant]
}

func (w *tenantWork) pipeline() *salvage.Pipeline {
	return &salvage.Pipeline{
		Name:       "tenanted",
		TenantFrom: "customer",
		Split: func(in json.RawMessage) ([]json.RawMessage, error) {
			var job struct {
				Tenant string `json:"tenant"`
				N      int    `json:"n"`
			}
			if err := json.Unmarshal(in, &job); err != nil || job.N < 1 {
				return nil, fmt.Errorf("%w: want {tenant, n}", salvage.ErrBadInput)
			}
			out := make([]json.RawMessage, job.N)
			for i := range out {
				out[i] = json.RawMessage(fmt.Sprintf(`{"tenant":%q,"i":%d}`, job.Tenant, i))
			}
			return out, nil
		},
		Stages: []salvage.Stage{{Name: "work", Agents: []salvage.Agent{{Name: "worker", Run: func(ctx context.Context, t *salvage.Turn) (any, error) {
			var c struct {
				Tenant string `json:"tenant"`
			}
			if err := json.Unmarshal(t.Input, &c); err != nil {
				return nil, err
			}
			w.mu.Lock()
			w.running[c.Tenant]++
			w.started[c.Tenant]++
			w.most[c.Tenant] = max(w.most[c.Tenant], w.running[c.Tenant])
			gate := w.gated[c.Tenant]
			w.mu.Unlock()
			defer func() {
				w.mu.Lock()
				w.running[c.Tenant]--
				w.mu.Unlock()
			}()
			if gate != nil {
				select {
				case <-gate:
				case <-ctx.Done():
					return nil, ctx.Err()
				}
			}
			time.Sleep(w.work)
			return "done", nil
		}}}}},
	}
}

func submitFor(t *testing.T, c *salvage.Client, tenant string, n int) string {
	t.Helper()
	id, err := c.JobSubmit(context.Background(), "tenanted", map[string]any{"tenant": tenant, "n": n},
		&salvage.SubmitOpts{Metadata: map[string]any{"customer": tenant}})
	if err != nil {
		t.Fatal(err)
	}
	return id
}

// TestTenantCapLeavesSlotsToOthers: tenant a may run 3 chunks at once
// across two processes of 4 slots each. Its 40-chunk job's chunks block
// until released; meanwhile the chunks of a waiting for their turn give
// their slots up, so tenant b's job, submitted behind a's, runs to the
// end. Tenant a never runs more than 3 at once, and finishes once
// released.
func TestTenantCapLeavesSlotsToOthers(t *testing.T) {
	t.Parallel()
	w := newTenantWork(0)
	srv := salvagetest.StartServer(t)
	key := salvage.LimitKey(salvage.LimitTenant, "a")
	c := srv.Client(t, &salvage.Config{Pipelines: []*salvage.Pipeline{w.pipeline()}, Roles: salvage.AllRoles(), Concurrency: 4,
		Limits: []salvage.Limit{{Key: key, Chunks: 3}}})
	srv.Client(t, &salvage.Config{Pipelines: []*salvage.Pipeline{w.pipeline()}, Roles: []salvage.Role{salvage.RoleWorker}, Concurrency: 4})
	ctx := context.Background()
	release := w.gate("a")
	a := submitFor(t, c, "a", 40)
	salvagetest.Eventually(t, time.Minute, func() bool {
		running, _, _ := w.count("a")
		return running == 3
	}, "tenant a running its 3 chunks")
	b := submitFor(t, c, "b", 12)
	if j := salvagetest.WaitJob(t, c, b, time.Minute); j.Status != salvage.JobDone || j.Tenant != "b" {
		t.Fatalf("tenant b's job, with tenant a at its cap: %+v", j)
	}
	if _, most, started := w.count("a"); most > 3 || started != 3 {
		t.Fatalf("tenant a: %d at most at once, %d started while gated; want 3 and 3", most, started)
	}
	ls, err := c.LimitList(ctx)
	if err != nil || len(ls) != 1 || ls[0].Chunks != 3 || ls[0].HeldChunks > 3 {
		t.Fatalf("limits = %+v, %v", ls, err)
	}
	close(release)
	if j := salvagetest.WaitJob(t, c, a, 2*time.Minute); j.Status != salvage.JobDone || j.Tenant != "a" {
		t.Fatalf("tenant a's job = %+v", j)
	}
	if _, most, started := w.count("a"); most > 3 || started != 40 {
		t.Errorf("tenant a: %d at most at once, %d started; want at most 3, and 40", most, started)
	}
}

// TestLargeJobDoesNotStarveAnotherTenant: tenant a's job of 5,000 chunks
// runs, capped at 4 chunks in flight, when tenant b submits a job of 20:
// b's job finishes while a's still runs, a never passes its cap, and b's
// time beside a is logged against its time alone (the bench row
// `salvage bench --only tenants` holds the comparison).
func TestLargeJobDoesNotStarveAnotherTenant(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("a 5,000-chunk job")
	}
	w := newTenantWork(5 * time.Millisecond)
	srv := salvagetest.StartServer(t)
	c := srv.Client(t, &salvage.Config{Pipelines: []*salvage.Pipeline{w.pipeline()}, Roles: salvage.AllRoles(), Concurrency: 8,
		Limits: []salvage.Limit{{Key: salvage.LimitKey(salvage.LimitTenant, "a"), Chunks: 4}}})
	ctx := context.Background()
	start := time.Now()
	alone := submitFor(t, c, "b", 20)
	if j := salvagetest.WaitJob(t, c, alone, time.Minute); j.Status != salvage.JobDone {
		t.Fatalf("b alone: %+v", j)
	}
	aloneTook := time.Since(start)
	a := submitFor(t, c, "a", 5000)
	salvagetest.Eventually(t, time.Minute, func() bool {
		_, _, started := w.count("a")
		return started >= 50
	}, "tenant a's job under way")
	start = time.Now()
	beside := submitFor(t, c, "b", 20)
	if j := salvagetest.WaitJob(t, c, beside, time.Minute); j.Status != salvage.JobDone {
		t.Fatalf("b beside a: %+v", j)
	}
	besideTook := time.Since(start)
	ja, err := c.JobGet(ctx, a)
	if err != nil {
		t.Fatal(err)
	}
	if ja.Status != salvage.JobRunning {
		t.Fatalf("tenant a's job is %s when b's finished: b waited for it", ja.Status)
	}
	if _, most, _ := w.count("a"); most > 4 {
		t.Errorf("tenant a ran %d chunks at once; its cap is 4", most)
	}
	t.Logf("b's 20 chunks: %s alone, %s beside a's 5,000 (%.2fx)", aloneTook.Round(time.Millisecond), besideTook.Round(time.Millisecond),
		besideTook.Seconds()/aloneTook.Seconds())
	if _, err := c.JobCancel(ctx, a, "test"); err != nil && !errors.Is(err, salvage.ErrJobFinished) {
		t.Fatal(err)
	}
	salvagetest.WaitJob(t, c, a, 2*time.Minute)
}

// TestTenantIsAToken: a tenant named at submission, or in the metadata
// field the pipeline names, must be a subject token: Submit refuses one
// at once, and the splitter rejects a job whose metadata holds one.
func TestTenantIsAToken(t *testing.T) {
	t.Parallel()
	w := newTenantWork(0)
	srv := salvagetest.StartServer(t)
	c := srv.Client(t, &salvage.Config{Pipelines: []*salvage.Pipeline{w.pipeline()}, Roles: salvage.AllRoles()})
	ctx := context.Background()
	for _, bad := range []string{"a.b", "a*", ">", "a b"} {
		if _, err := c.JobSubmit(ctx, "tenanted", map[string]any{"tenant": "x", "n": 1}, &salvage.SubmitOpts{Tenant: bad}); !errors.Is(err, salvage.ErrInvalidToken) {
			t.Errorf("Submit with tenant %q: %v; want ErrInvalidToken", bad, err)
		}
	}
	id, err := c.JobSubmit(ctx, "tenanted", map[string]any{"tenant": "x", "n": 1}, &salvage.SubmitOpts{Metadata: map[string]any{"customer": "x.y"}})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.JobWaitAccepted(ctx, id); !errors.Is(err, salvage.ErrRejected) {
		t.Errorf("a job whose metadata names tenant x.y: %v; want ErrRejected", err)
	}
	id, err = c.JobSubmit(ctx, "tenanted", map[string]any{"tenant": "x", "n": 1}, &salvage.SubmitOpts{Tenant: "given", Metadata: map[string]any{"customer": "x"}})
	if err != nil {
		t.Fatal(err)
	}
	if j := salvagetest.WaitJob(t, c, id, time.Minute); j.Tenant != "given" {
		t.Errorf("tenant = %q; want the one given at submission, over the metadata's", j.Tenant)
	}
}

// TestCancelEndsTheWaitForATenantsTurn: a job of a tenant capped at one
// chunk in flight is cancelled while one chunk runs and the rest wait
// for their turn: the job ends cancelled, and no waiting chunk ran.
func TestCancelEndsTheWaitForATenantsTurn(t *testing.T) {
	t.Parallel()
	w := newTenantWork(0)
	srv := salvagetest.StartServer(t)
	c := srv.Client(t, &salvage.Config{Pipelines: []*salvage.Pipeline{w.pipeline()}, Roles: salvage.AllRoles(), Concurrency: 4,
		Limits: []salvage.Limit{{Key: salvage.LimitKey(salvage.LimitTenant, "a"), Chunks: 1}}})
	ctx := context.Background()
	w.gate("a")
	id := submitFor(t, c, "a", 6)
	salvagetest.Eventually(t, time.Minute, func() bool {
		running, _, _ := w.count("a")
		return running == 1
	}, "one chunk of tenant a running")
	if _, err := c.JobCancel(ctx, id, "test"); err != nil {
		t.Fatal(err)
	}
	if j := salvagetest.WaitJob(t, c, id, time.Minute); j.Status != salvage.JobCancelled {
		t.Fatalf("job = %+v; want cancelled", j)
	}
	if _, most, started := w.count("a"); most != 1 || started != 1 {
		t.Errorf("tenant a: %d at once, %d started; want the one that ran when the cancel came", most, started)
	}
}

// TestTenantLimitPacesItsCalls: a limit on tenant.slow paces the calls
// its jobs' chunks make, and no one else's: tenant fast's job, with no
// limit, has no call that waited; tenant slow's calls never pass the
// limit in any five seconds, and their journal rows say they waited.
func TestTenantLimitPacesItsCalls(t *testing.T) {
	t.Parallel()
	const rpm = 1200
	p := &provider{}
	srv := salvagetest.StartServer(t)
	c := srv.Client(t, &salvage.Config{Pipelines: []*salvage.Pipeline{p.pipeline()}, Roles: salvage.AllRoles(), Concurrency: 8,
		Limits: []salvage.Limit{{Key: salvage.LimitKey(salvage.LimitTenant, "slow"), RequestsPerMinute: rpm}}})
	ctx := context.Background()
	waited := func(id string) int {
		t.Helper()
		tr, err := c.JobTracePage(ctx, id, &salvage.Page{Limit: salvage.PageMax})
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, ch := range tr.Chunks {
			for _, call := range ch.Calls {
				if call.LimitWaitMS > 0 {
					n++
				}
			}
		}
		return n
	}
	fast, err := c.JobSubmit(ctx, "paced", 25, &salvage.SubmitOpts{Tenant: "fast"})
	if err != nil {
		t.Fatal(err)
	}
	if j := salvagetest.WaitJob(t, c, fast, time.Minute); j.Status != salvage.JobDone {
		t.Fatalf("fast = %+v", j)
	}
	if n := waited(fast); n != 0 {
		t.Errorf("%d calls of tenant fast waited for a limit; it has none", n)
	}
	p.mu.Lock()
	p.calls = nil
	p.mu.Unlock()
	slow, err := c.JobSubmit(ctx, "paced", 25, &salvage.SubmitOpts{Tenant: "slow"})
	if err != nil {
		t.Fatal(err)
	}
	if j := salvagetest.WaitJob(t, c, slow, time.Minute); j.Status != salvage.JobDone {
		t.Fatalf("slow = %+v", j)
	}
	perSec := rpm / 60
	if most := p.mostIn(5 * time.Second); most > 5*perSec+perSec {
		t.Errorf("%d requests of tenant slow in 5 s; its limit allows %d and a second's burst (%d)", most, 5*perSec, perSec)
	}
	if n := waited(slow); n == 0 {
		t.Errorf("no call of tenant slow's 100 at %d a minute says it waited for the limit", rpm)
	}
}
