package dashboard

import (
	"fmt"
	"net/http"
	"time"

	"github.com/salvagehq/salvage"
)

// apiBulk replays, resolves or acknowledges every envelope a filter
// matches: POST /api/bulk with {"action", "category"?, "status"?,
// "job_id"?, "min_age"?, "dry_run"?, "note"?}. The page asks with
// dry_run first and confirms the count before it acts.
func (s *Server) apiBulk(w http.ResponseWriter, r *http.Request) {
	ctx, err := s.authorize(r)
	if err != nil {
		fail(w, authStatus(w, err), err)
		return
	}
	var body struct {
		Action   salvage.BulkAction     `json:"action"`
		Category salvage.Category       `json:"category"`
		Status   salvage.EnvelopeStatus `json:"status"`
		Job      string                 `json:"job_id"`
		MinAge   string                 `json:"min_age"`
		DryRun   bool                   `json:"dry_run"`
		Note     string                 `json:"note"`
	}
	if err := decodeBody(w, r, &body); err != nil {
		fail(w, http.StatusBadRequest, err)
		return
	}
	f := salvage.EnvelopeFilter{Category: body.Category, Status: body.Status, Job: body.Job}
	if body.MinAge != "" {
		d, err := time.ParseDuration(body.MinAge)
		if err != nil {
			fail(w, http.StatusBadRequest, fmt.Errorf("min_age: %w", err))
			return
		}
		f.MinAge = d
	}
	res, err := s.client.EnvelopeBulk(ctx, salvage.BulkRequest{Action: body.Action, Filter: f, Note: body.Note, DryRun: body.DryRun})
	if err != nil {
		fail(w, statusOf(err), err)
		return
	}
	writeJSON(w, http.StatusOK, res)
}
