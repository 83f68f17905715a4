package dashboard

import (
	"errors"
	"net/http"
	"strconv"

	"github.com/salvagehq/salvage"
)

// apiAudit lists the operator actions on a job (job=), an envelope
// (envelope=), a pipeline (pipeline=) or all of them, oldest first, a
// page at a time (after=, limit=), or with newest=1 the latest first:
// Client.AuditList.
func (s *Server) apiAudit(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	aq := salvage.AuditQuery{Job: q.Get("job"), Envelope: q.Get("envelope"), Pipeline: q.Get("pipeline"), Action: salvage.AuditAction(q.Get("action")),
		Newest: q.Get("newest") == "1"}
	for name, dst := range map[string]any{"after": &aq.After, "limit": &aq.Limit} {
		v := q.Get(name)
		if v == "" {
			continue
		}
		n, err := strconv.ParseUint(v, 10, 63)
		if err != nil {
			fail(w, http.StatusBadRequest, errors.New(name+": want a number"))
			return
		}
		switch d := dst.(type) {
		case *uint64:
			*d = n
		case *int:
			*d = int(n)
		}
	}
	p, err := s.client.AuditList(r.Context(), aq)
	if err != nil {
		fail(w, statusOf(err), err)
		return
	}
	writeJSON(w, http.StatusOK, p)
}

// apiHeld lists the chunks waiting in SALVAGE_HOLD across jobs
// (?system=, ?limit=): Client.ChunkListHeld.
func (s *Server) apiHeld(w http.ResponseWriter, r *http.Request) {
	limit := 0
	if v := r.URL.Query().Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil {
			fail(w, http.StatusBadRequest, errors.New("limit: want a number"))
			return
		}
		limit = n
	}
	hs, err := s.client.ChunkListHeld(r.Context(), r.URL.Query().Get("system"), limit)
	if err != nil {
		fail(w, statusOf(err), err)
		return
	}
	writeJSON(w, http.StatusOK, hs)
}
