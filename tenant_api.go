package salvage

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nats.go/micro"

	"github.com/salvagehq/salvage/salvagetype"
	"github.com/salvagehq/salvage/streams"
)

// Tenants kept apart (issue 36). A tenant's user may publish only on
// salvage.api.tenant.<tenant>.>, which the server's permissions enforce:
// the tenant a request speaks for is its subject's, never its body's.
// Through those endpoints it submits jobs (recorded as its own), and
// lists, reads, cancels and reads the results of its own jobs only; a job
// of another tenant answers as a job that does not exist.

// TenantPrefix is the subject prefix of tenant t's endpoints:
// salvage.api.tenant.<t>.jobs.{submit,status,list,cancel,results}.
func TenantPrefix(t string) string { return ServicePrefix + ".tenant." + t }

// tenantEndpoints are the endpoints every tenant has, under
// TenantPrefix("*").
func (c *Client) tenantEndpoints() map[string]func(context.Context, micro.Request) (any, error) {
	return map[string]func(context.Context, micro.Request) (any, error){
		"jobs.submit": c.apiTenantSubmit, "jobs.status": c.apiTenantStatus, "jobs.list": c.apiTenantJobs,
		"jobs.cancel": c.apiTenantCancel, "jobs.results": c.apiTenantResults,
	}
}

// requestTenant is the tenant whose endpoint req came on.
func requestTenant(req micro.Request) (string, error) {
	rest, ok := strings.CutPrefix(req.Subject(), ServicePrefix+".tenant.")
	t, _, ok2 := strings.Cut(rest, ".")
	if !ok || !ok2 {
		return "", fmt.Errorf("%w: %s is no tenant's endpoint", errMalformed, req.Subject())
	}
	return t, salvagetype.ValidateToken("tenant", t)
}

// tenantJob returns job id when it is tenant's, else an error wrapping
// ErrUnknownJob — the same as for a job that does not exist, so that a
// tenant learns nothing of another's.
func (c *Client) tenantJob(ctx context.Context, tenant, id string) (*Job, error) {
	j, err := c.JobGet(ctx, id)
	if errors.Is(err, ErrUnknownJob) || (err == nil && j.Tenant != tenant) {
		return nil, fmt.Errorf("%w: %s", ErrUnknownJob, id)
	}
	return j, err
}

// apiTenantSubmit takes jobs.submit's body; the job is the tenant's. A
// body naming another tenant is refused.
func (c *Client) apiTenantSubmit(ctx context.Context, req micro.Request) (any, error) {
	t, err := requestTenant(req)
	if err != nil {
		return nil, err
	}
	var r submitRequest
	if err := decodeBytes(req.Data(), &r, false, c.cfg.MaxPayload); err != nil {
		return nil, err
	}
	if r.Tenant != "" && r.Tenant != t {
		return nil, fmt.Errorf("%w: tenant %q: a tenant submits its own jobs only", errMalformed, r.Tenant)
	}
	r.Tenant = t
	return c.submitFrom(ctx, req, r)
}

// apiTenantStatus takes {"job_id", "offset"?, "limit"?}, as jobs.status.
func (c *Client) apiTenantStatus(ctx context.Context, req micro.Request) (any, error) {
	t, r, err := tenantJobRequest(req)
	if err != nil {
		return nil, err
	}
	// One read: the state names the job's tenant.
	st, err := c.ChunkList(ctx, r.JobID, &r.Page)
	if errors.Is(err, ErrUnknownJob) || (err == nil && st.Job.Tenant != t) {
		return nil, fmt.Errorf("%w: %s", ErrUnknownJob, r.JobID)
	}
	return st, err
}

// apiTenantCancel takes {"job_id"}; the cancel is recorded as by
// tenant:<tenant>.
func (c *Client) apiTenantCancel(ctx context.Context, req micro.Request) (any, error) {
	t, r, err := tenantJobRequest(req)
	if err != nil {
		return nil, err
	}
	if _, err := c.tenantJob(ctx, t, r.JobID); err != nil {
		return nil, err
	}
	return c.JobCancel(ctx, r.JobID, "tenant:"+t)
}

// apiTenantJobs takes {"offset"?, "limit"?}: a page of the tenant's job
// records, newest first.
func (c *Client) apiTenantJobs(ctx context.Context, req micro.Request) (any, error) {
	t, err := requestTenant(req)
	if err != nil {
		return nil, err
	}
	var p Page
	if err := decode(req, &p, true); err != nil {
		return nil, err
	}
	if err := checkPage(p); err != nil {
		return nil, err
	}
	jobs, err := c.JobListTenant(ctx, t, &p)
	if jobs == nil {
		jobs = []Job{}
	}
	return jobs, err
}

// apiTenantResults takes {"job_id", "offset"?, "limit"?}: a page of the
// job's findings by chunk (JobResultsPage).
func (c *Client) apiTenantResults(ctx context.Context, req micro.Request) (any, error) {
	t, r, err := tenantJobRequest(req)
	if err != nil {
		return nil, err
	}
	j, err := c.tenantJob(ctx, t, r.JobID)
	if err != nil {
		return nil, err
	}
	return c.resultsPage(ctx, j, &r.Page)
}

func tenantJobRequest(req micro.Request) (string, jobRequest, error) {
	t, err := requestTenant(req)
	if err != nil {
		return "", jobRequest{}, err
	}
	r, err := readJobRequest(req)
	return t, r, err
}

// JobListTenant returns one page (nil: the first PageDefault) of
// tenant's job records, newest first, from the tenant's own index:
// O(log n + page) whatever the other tenants have.
func (c *Client) JobListTenant(ctx context.Context, tenant string, page *Page) ([]Job, error) {
	st, err := c.storesFor(ctx)
	if err != nil {
		return nil, err
	}
	offset, limit := page.window()
	pg, err := st.Jobs.TenantPage(ctx, tenant, offset, limit)
	if err != nil {
		return nil, err
	}
	return jobsOf(pg.Jobs), nil
}

// ResultsPageMax bounds a page of results: findings are up to a chunk
// message's size each, and a reply is at most MaxReply.
const ResultsPageMax = 100

// Results is a page of a job's findings.
type Results struct {
	JobID string `json:"job_id"`
	// Chunks is how many chunks the job has.
	Chunks int `json:"chunks"`
	// Results are the findings of the page's chunks that have one
	// (finished, and kept: SALVAGE_RESULTS holds them 7 days), by chunk.
	Results []ChunkResult `json:"results"`
	// NextOffset is where the next page begins; 0 after the last.
	NextOffset int `json:"next_offset,omitempty"`
}

// ChunkResult is one chunk's findings.
type ChunkResult struct {
	Chunk  int             `json:"chunk"`
	Result json.RawMessage `json:"result"`
}

// JobResultsPage returns the findings of job id's chunks offset+1 to
// offset+limit (limit at most ResultsPageMax), one read each: a page
// costs O(limit), however many chunks the job has.
func (c *Client) JobResultsPage(ctx context.Context, id string, page *Page) (*Results, error) {
	j, err := c.JobGet(ctx, id)
	if err != nil {
		return nil, err
	}
	return c.resultsPage(ctx, j, page)
}

// resultsPage is JobResultsPage of the job j, read already.
func (c *Client) resultsPage(ctx context.Context, j *Job, page *Page) (*Results, error) {
	id := j.ID
	offset, limit := page.window()
	limit = min(limit, ResultsPageMax)
	s, err := c.js.Stream(ctx, streams.Results)
	if err != nil {
		return nil, fmt.Errorf("salvage: results of %s: %w", id, err)
	}
	out := &Results{JobID: id, Chunks: j.Chunks, Results: []ChunkResult{}}
	end := min(offset+limit, j.Chunks)
	for chunk := offset + 1; chunk <= end; chunk++ {
		m, err := s.GetLastMsgForSubject(ctx, streams.ChunkRef{Job: id, Chunk: chunk}.Result())
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("salvage: result of chunk %d of %s: %w", chunk, id, err)
		}
		out.Results = append(out.Results, ChunkResult{Chunk: chunk, Result: m.Data})
	}
	if end < j.Chunks {
		out.NextOffset = end
	}
	return out, nil
}
