package dashboard

import (
	"errors"
	"net/http"

	"github.com/salvagehq/salvage"
)

// apiPipelines lists the pipelines, paused or not, with what each has
// parked.
func (s *Server) apiPipelines(w http.ResponseWriter, r *http.Request) {
	ps, err := s.client.PipelineList(r.Context())
	if err != nil {
		fail(w, statusOf(err), err)
		return
	}
	writeJSON(w, http.StatusOK, ps)
}

// apiWorkers lists the live processes.
func (s *Server) apiWorkers(w http.ResponseWriter, r *http.Request) {
	ws, err := s.client.WorkerList(r.Context())
	if err != nil {
		fail(w, statusOf(err), err)
		return
	}
	if ws == nil {
		ws = []salvage.Worker{}
	}
	writeJSON(w, http.StatusOK, ws)
}

// apiPause pauses or resumes a pipeline: POST
// /api/pipelines/<name>/pause|resume with {"reason"?}.
func (s *Server) apiPause(w http.ResponseWriter, r *http.Request) {
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
	var p salvage.PipelineStatus
	switch r.PathValue("action") {
	case "pause":
		p, err = s.client.PipelinePause(ctx, r.PathValue("name"), "", body.Reason)
	case "resume":
		p, err = s.client.PipelineResume(salvage.WithReason(ctx, body.Reason), r.PathValue("name"), "")
	default:
		fail(w, http.StatusNotFound, errors.New("unknown action: want pause or resume"))
		return
	}
	if err != nil {
		fail(w, statusOf(err), err)
		return
	}
	s.sum.breakers.readPipelines(r.Context(), s.client, s.log)
	writeJSON(w, http.StatusOK, p)
}
