package dashboard

import (
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/salvagehq/salvage"
	"github.com/salvagehq/salvage/cmd/salvage/internal/timeline"
)

// JobRow is one job in the job list.
type JobRow struct {
	ID           string            `json:"job_id"`
	Pipeline     string            `json:"pipeline"`
	Status       salvage.JobStatus `json:"status"`
	Chunks       int               `json:"chunks"`
	Done         int               `json:"done"`
	DeadLettered int               `json:"dead_lettered"`
	Cancelled    int               `json:"cancelled"`
	CreatedAt    string            `json:"created_at"`
}

// JobList is what GET /api/jobs serves: a page of jobs, newest first,
// and how many jobs each status has.
type JobList struct {
	Jobs       []JobRow       `json:"jobs"`
	Total      int            `json:"total"`
	Offset     int            `json:"offset"`
	NextOffset int            `json:"next_offset,omitempty"`
	Counts     map[string]int `json:"counts"`
}

// pageOf reads ?offset= and ?limit= from q.
func pageOf(q url.Values) (salvage.Page, error) {
	var page salvage.Page
	for name, dst := range map[string]*int{"offset": &page.Offset, "limit": &page.Limit} {
		if v := q.Get(name); v != "" {
			n, err := strconv.Atoi(v)
			if err != nil || n < 0 {
				return page, fmt.Errorf("%s: want a number >= 0, got %q", name, v)
			}
			*dst = n
		}
	}
	return page, nil
}

// apiJobs lists jobs from the watched index: ?status= (one of the tabs),
// ?q= (a part of the id or the pipeline), ?offset=&limit=. Counts are per
// status of the jobs the search finds.
func (s *Server) apiJobs(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	status := salvage.JobStatus(q.Get("status"))
	if status != "" && !slices.Contains(salvage.JobStatuses(), status) {
		fail(w, http.StatusBadRequest, fmt.Errorf("status %q: want one of %v", status, salvage.JobStatuses()))
		return
	}
	page, err := pageOf(q)
	if err != nil {
		fail(w, http.StatusBadRequest, err)
		return
	}
	if k, v, ok := strings.Cut(q.Get("q"), "="); ok {
		s.searchJobs(w, r, salvage.JobQuery{MetaKey: strings.TrimSpace(k), MetaValue: strings.TrimSpace(v), Offset: page.Offset, Limit: page.Limit}, status)
		return
	}
	search := strings.ToLower(q.Get("q"))
	jobs, _ := s.sum.jobs.snapshot()
	out := JobList{Counts: map[string]int{}}
	rows := make([]JobRow, 0, len(jobs))
	for _, j := range jobs {
		if search != "" && !strings.Contains(strings.ToLower(j.ID), search) && !strings.Contains(j.Pipeline, search) {
			continue
		}
		// The tabs count what the search finds.
		out.Counts[string(j.Status)]++
		if status != "" && j.Status != status {
			continue
		}
		rows = append(rows, JobRow{ID: j.ID, Pipeline: j.Pipeline, Status: j.Status, Chunks: j.Chunks, Done: j.Summary.Done,
			DeadLettered: j.Summary.DeadLettered, Cancelled: j.Summary.Cancelled, CreatedAt: j.CreatedAt.UTC().Format("2006-01-02T15:04:05Z")})
	}
	sort.Slice(rows, func(i, k int) bool {
		if rows[i].CreatedAt != rows[k].CreatedAt {
			return rows[i].CreatedAt > rows[k].CreatedAt
		}
		return rows[i].ID > rows[k].ID
	})
	from, to := page.Bounds(len(rows))
	out.Jobs, out.Total, out.Offset = rows[from:to], len(rows), from
	if to < len(rows) {
		out.NextOffset = to
	}
	writeJSON(w, http.StatusOK, out)
}

// searchJobs answers a search of the job list for a metadata pair
// (q=KEY=VALUE) from the pair's index (Client.JobSearch), in the list's
// shape; the tabs count the page.
func (s *Server) searchJobs(w http.ResponseWriter, r *http.Request, jq salvage.JobQuery, status salvage.JobStatus) {
	if status != "" {
		jq.Statuses = []salvage.JobStatus{status}
	}
	p, err := s.client.JobSearch(r.Context(), jq)
	if err != nil {
		fail(w, statusOf(err), err)
		return
	}
	out := JobList{Counts: map[string]int{}, Jobs: []JobRow{}, Total: p.Total, Offset: jq.Offset, NextOffset: p.NextOffset}
	for _, j := range p.Items {
		out.Counts[string(j.Status)]++
		out.Jobs = append(out.Jobs, JobRow{ID: j.ID, Pipeline: j.Pipeline, Status: j.Status, Chunks: j.Chunks, Done: j.Summary.Done,
			DeadLettered: j.Summary.DeadLettered, Cancelled: j.Summary.Cancelled, CreatedAt: j.CreatedAt.UTC().Format("2006-01-02T15:04:05Z")})
	}
	writeJSON(w, http.StatusOK, out)
}

// apiJobActions says which actions on the job the server would take now
// (Client.JobActionsOf): the page asks before it shows its buttons.
func (s *Server) apiJobActions(w http.ResponseWriter, r *http.Request) {
	a, err := s.client.JobActionsOf(r.Context(), r.PathValue("id"))
	if err != nil {
		fail(w, statusOf(err), err)
		return
	}
	writeJSON(w, http.StatusOK, a)
}

// apiJob serves one job and a page of its chunks (?offset=&limit=);
// ?filter=failed pages through only the chunks that failed or wait,
// dead-lettered first (salvage.Client.ChunkListFailing: it reads the chunks the
// job's attention index names, not every chunk), with how many match.
func (s *Server) apiJob(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	page, err := pageOf(q)
	if err != nil {
		fail(w, http.StatusBadRequest, err)
		return
	}
	id := r.PathValue("id")
	var st any
	switch q.Get("filter") {
	case "":
		st, err = s.client.ChunkList(r.Context(), id, &page)
	case "failed":
		st, err = s.client.ChunkListFailing(r.Context(), id, &page)
	default:
		fail(w, http.StatusBadRequest, fmt.Errorf("filter %q: want failed, or none", q.Get("filter")))
		return
	}
	if err != nil {
		fail(w, statusOf(err), err)
		return
	}
	writeJSON(w, http.StatusOK, st)
}

// apiCancelJob cancels a job from the page: POST /api/jobs/{id}/cancel,
// guarded like every mutation (a token or a signed-in person, same
// origin).
func (s *Server) apiCancelJob(w http.ResponseWriter, r *http.Request) {
	ctx, err := s.authorize(r)
	if err != nil {
		fail(w, authStatus(w, err), err)
		return
	}
	var body struct {
		Reason string `json:"reason"`
	}
	if err := decodeBody(w, r, &body); err != nil {
		fail(w, http.StatusBadRequest, err)
		return
	}
	j, err := s.client.JobCancel(salvage.WithReason(ctx, body.Reason), r.PathValue("id"), "")
	if err != nil {
		fail(w, statusOf(err), err)
		return
	}
	writeJSON(w, http.StatusOK, j)
}

// chunkTrace is one chunk's trace and its timeline: its calls, earlier
// runs and events merged in time order, each saying what it means.
type chunkTrace struct {
	*salvage.TraceChunk
	Timeline []timeline.Entry `json:"timeline"`
}

// apiChunkTrace serves one chunk's timeline.
func (s *Server) apiChunkTrace(w http.ResponseWriter, r *http.Request) {
	chunk, err := strconv.Atoi(r.PathValue("chunk"))
	if err != nil || chunk < 1 {
		fail(w, http.StatusBadRequest, fmt.Errorf("chunk: want a number from 1"))
		return
	}
	c, err := s.client.ChunkTrace(r.Context(), r.PathValue("id"), chunk)
	if err != nil {
		fail(w, statusOf(err), err)
		return
	}
	writeJSON(w, http.StatusOK, chunkTrace{TraceChunk: c, Timeline: timeline.Of(*c)})
}
