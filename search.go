package salvage

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go/micro"
	"github.com/salvagehq/salvage/kv"
	"github.com/salvagehq/salvage/salvagetype"
)

// JobQuery selects jobs, newest first: those whose metadata has MetaKey =
// MetaValue (one of the first MetaIndexMax top-level string, number or
// boolean pairs, by key), else those of Tenant, else every job — each read
// from its own index, never every record — narrowed by pipeline, status
// and the time they were created.
type JobQuery struct {
	MetaKey   string `json:"meta_key,omitempty"`
	MetaValue string `json:"meta_value,omitempty"`
	Tenant    string `json:"tenant,omitempty"`
	Pipeline  string `json:"pipeline,omitempty"`
	// Statuses keeps the jobs in any of them.
	Statuses []JobStatus `json:"statuses,omitempty"`
	// CreatedAfter and CreatedBefore bound when the job was created.
	CreatedAfter  time.Time `json:"created_after,omitzero"`
	CreatedBefore time.Time `json:"created_before,omitzero"`
	// FinishedAfter and FinishedBefore bound when it finished; a job
	// still running matches neither.
	FinishedAfter  time.Time `json:"finished_after,omitzero"`
	FinishedBefore time.Time `json:"finished_before,omitzero"`
	// Offset continues a search: the NextOffset of its previous page.
	Offset int `json:"offset,omitempty"`
	// Limit bounds the page: default PageDefault, at most PageMax.
	Limit int `json:"limit,omitempty"`
}

// apiJobSearch takes a JobQuery and answers a JobSearchPage.
func (c *Client) apiJobSearch(ctx context.Context, req micro.Request) (any, error) {
	var q JobQuery
	if err := decode(req, &q, true); err != nil {
		return nil, err
	}
	return c.JobSearch(ctx, q)
}

// MetaIndexMax bounds the metadata pairs of one job a search finds it by.
const MetaIndexMax = salvagetype.MetaIndexMax

// JobSearchPage is one page of a job search.
type JobSearchPage struct {
	Items []Job `json:"items"`
	// Total is how many jobs the index read lists (the pair's, the
	// tenant's or every job), before pipeline, status and time narrow
	// them.
	Total int `json:"total"`
	// NextOffset continues the search (JobQuery.Offset); 0 when the
	// index holds no more.
	NextOffset int `json:"next_offset,omitempty"`
}

// searchScanMax bounds the index entries one page reads, whatever the
// narrowing keeps: a page shorter than its limit with a NextOffset is the
// bound.
const searchScanMax = 5000

// Validate reports a query that cannot run (ErrBadFilter).
func (q JobQuery) Validate() error {
	switch {
	case q.MetaKey == "" && q.MetaValue != "":
		return fmt.Errorf("%w: a metadata value needs its key", ErrBadFilter)
	case q.Offset < 0 || q.Limit < 0 || q.Limit > PageMax:
		return fmt.Errorf("%w: offset %d, limit %d: want 0 or more, a limit up to %d", ErrBadFilter, q.Offset, q.Limit, PageMax)
	case !q.CreatedAfter.IsZero() && !q.CreatedBefore.IsZero() && !q.CreatedAfter.Before(q.CreatedBefore):
		return fmt.Errorf("%w: created_after %s is not before created_before %s", ErrBadFilter, q.CreatedAfter.Format(time.RFC3339), q.CreatedBefore.Format(time.RFC3339))
	}
	for _, st := range q.Statuses {
		if !slices.Contains(JobStatuses(), st) {
			return fmt.Errorf("%w: status %q: want one of %v", ErrBadFilter, st, JobStatuses())
		}
	}
	if q.Tenant != "" {
		if err := salvagetype.ValidateToken("tenant", q.Tenant); err != nil {
			return fmt.Errorf("%w: %w", ErrBadFilter, err)
		}
	}
	return nil
}

// JobStatuses returns every job status, in a slice of the caller's own.
func JobStatuses() []JobStatus {
	return []JobStatus{JobRunning, JobDone, JobPartial, JobIncomplete, JobCancelled}
}

// JobSearch returns a page of the jobs q selects. It reads the index of
// q's metadata pair, else its tenant's, else every job's, newest first, a
// page at a time (O(log n + page) each), and keeps the jobs the rest of q
// matches; it stops at the first job created before CreatedAfter.
func (c *Client) JobSearch(ctx context.Context, q JobQuery) (*JobSearchPage, error) {
	if err := q.Validate(); err != nil {
		return nil, err
	}
	st, err := c.storesFor(ctx)
	if err != nil {
		return nil, err
	}
	limit := q.Limit
	if limit == 0 {
		limit = PageDefault
	}
	read := func(offset, n int) (kv.JobPage, error) {
		switch {
		case q.MetaKey != "":
			return st.Jobs.MetaPage(ctx, q.MetaKey, q.MetaValue, offset, n)
		case q.Tenant != "":
			return st.Jobs.TenantPage(ctx, q.Tenant, offset, n)
		}
		return st.Jobs.Page(ctx, offset, n)
	}
	out := &JobSearchPage{Items: []Job{}}
	offset := q.Offset
	for scanned := 0; scanned < searchScanMax; {
		n := min(max(limit*2, 50), searchScanMax-scanned, PageMax)
		pg, err := read(offset, n)
		if err != nil {
			return nil, err
		}
		out.Total = pg.Total
		for i, j := range pg.Jobs {
			if !q.CreatedAfter.IsZero() && j.CreatedAt.Before(q.CreatedAfter) {
				return out, nil
			}
			if q.matches(j) {
				out.Items = append(out.Items, jobOf(j))
				if len(out.Items) == limit {
					if offset+i+1 < pg.Total {
						out.NextOffset = offset + i + 1
					}
					return out, nil
				}
			}
		}
		offset += n
		scanned += n
		if offset >= pg.Total {
			return out, nil
		}
	}
	out.NextOffset = offset
	return out, nil
}

// matches reports whether j is one of q's, the index aside.
func (q JobQuery) matches(j kv.Job) bool {
	if q.Pipeline != "" && j.Pipeline != q.Pipeline || len(q.Statuses) > 0 && !slices.Contains(q.Statuses, j.Status) ||
		q.Tenant != "" && j.Tenant != q.Tenant || !q.CreatedBefore.IsZero() && !j.CreatedAt.Before(q.CreatedBefore) {
		return false
	}
	if !q.FinishedAfter.IsZero() || !q.FinishedBefore.IsZero() {
		if j.FinishedAt == nil || !q.FinishedAfter.IsZero() && j.FinishedAt.Before(q.FinishedAfter) ||
			!q.FinishedBefore.IsZero() && !j.FinishedAt.Before(q.FinishedBefore) {
			return false
		}
	}
	if q.MetaKey != "" {
		v, ok := salvagetype.MetaText(j.Metadata[q.MetaKey])
		return ok && v == q.MetaValue
	}
	return true
}

// ParseMeta reads a KEY=VALUE search pair.
func ParseMeta(s string) (key, value string, err error) {
	key, value, ok := strings.Cut(s, "=")
	if !ok || key == "" {
		return "", "", fmt.Errorf("%w: metadata %q: want KEY=VALUE", ErrBadFilter, s)
	}
	return key, value, nil
}
