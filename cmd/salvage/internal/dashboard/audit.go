package dashboard

import (
	"errors"
	"net/http"
	"strconv"

	"github.com/salvagehq/salvage"
)

// apiAudit lists the operator actions on a job (job=), an envelope
// (envelope=), a pipeline (pipeline=) or all of them, oldest first, a
// page at a time (after=, limit=): Client.AuditList.
func (s *Server) apiAudit(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	aq := salvage.AuditQuery{Job: q.Get("job"), Envelope: q.Get("envelope"), Pipeline: q.Get("pipeline"), Action: salvage.AuditAction(q.Get("action"))}
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
