package dashboard

import (
	"errors"
	"net/http"
	"strconv"

	"github.com/salvagehq/salvage"
)

// apiApprovals lists the chunks awaiting approval, longest waiting first
// (at most 100).
func (s *Server) apiApprovals(w http.ResponseWriter, r *http.Request) {
	list, err := s.client.ChunkListAwaiting(r.Context(), 100)
	if err != nil {
		fail(w, statusOf(err), err)
		return
	}
	writeJSON(w, http.StatusOK, list)
}

// apiDecide approves or rejects a chunk awaiting approval: POST
// /api/approvals/<job>/<chunk>/approve|reject with {"note"?}.
func (s *Server) apiDecide(w http.ResponseWriter, r *http.Request) {
	ctx, err := s.authorize(r)
	if err != nil {
		fail(w, authStatus(w, err), err)
		return
	}
	chunk, err := strconv.Atoi(r.PathValue("chunk"))
	if err != nil || chunk < 1 {
		fail(w, http.StatusBadRequest, errors.New("chunk: want a number from 1"))
		return
	}
	var body struct {
		Note string `json:"note"`
	}
	if err := decodeBody(w, r, &body); err != nil {
		fail(w, http.StatusBadRequest, err)
		return
	}
	d := salvage.Decision{Note: body.Note}
	switch r.PathValue("action") {
	case "approve":
	case "reject":
		d.Reject = true
	default:
		fail(w, http.StatusNotFound, errors.New("unknown action: want approve or reject"))
		return
	}
	ch, err := s.client.ChunkApprove(ctx, r.PathValue("job"), chunk, d)
	if err != nil {
		fail(w, statusOf(err), err)
		return
	}
	writeJSON(w, http.StatusOK, ch)
}
