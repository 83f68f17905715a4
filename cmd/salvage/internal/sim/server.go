package sim

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"time"

	"github.com/salvagehq/salvage/cmd/salvage/internal/simmodel"
)

// Headers the sim reads and writes.
const (
	HeaderIdempotencyKey = "Idempotency-Key"
	// HeaderRetryAfterMS carries a sub-second Retry-After.
	HeaderRetryAfterMS = "Retry-After-Ms"
	// HeaderReplayed is set on a repeat of an idempotency key.
	HeaderReplayed = "Idempotent-Replayed"
)

// maxBody bounds a request body.
const maxBody = 64 << 10

// EffectResponse is the answer to an effect or a verify request.
type EffectResponse struct {
	Applied    bool   `json:"applied"`
	System     string `json:"system"`
	Op         string `json:"op"`
	Key        string `json:"idempotency_key"`
	Order      string `json:"order,omitempty"`
	ResourceID string `json:"resource_id,omitempty"`
	Replayed   bool   `json:"replayed,omitempty"`
}

// Profile is what a read of a customer returns (GET
// /v1/<system>/customers/<id>): a read changes nothing and is not in the
// ledger.
type Profile struct {
	Customer string `json:"customer"`
	Tier     string `json:"tier"`
}

// tiers are the loyalty tiers profiles are spread over.
var tiers = []string{"bronze", "silver", "gold"}

// CompensateRequest names the effect to undo.
type CompensateRequest struct {
	Key string `json:"idempotency_key"`
}

// Handler serves the sim's HTTP API over state, with model answering
// /v1/chat/completions as an OpenAI-compatible API would and /v1/messages
// as Anthropic's Messages API would.
func Handler(state *State, model *simmodel.Model) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok\n") })
	mux.HandleFunc("GET /ledger", func(w http.ResponseWriter, _ *http.Request) { writeJSON(w, 200, state.Ledger()) })
	mux.HandleFunc("GET /ledger/summary", func(w http.ResponseWriter, _ *http.Request) { writeJSON(w, 200, state.Summary()) })
	handleAdmin(mux, state)
	mux.HandleFunc("POST /v1/chat/completions", func(w http.ResponseWriter, r *http.Request) { serveChat(w, r, state, model) })
	mux.HandleFunc("POST /v1/messages", func(w http.ResponseWriter, r *http.Request) { serveMessages(w, r, state, model) })
	handleSystems(mux, state)
	return mux
}

// handleAdmin serves what tests and the demo steer the sim with: the
// requests each system got, the model's quota use, and the faults.
func handleAdmin(mux *http.ServeMux, state *State) {
	mux.HandleFunc("GET /admin/requests", func(w http.ResponseWriter, _ *http.Request) { writeJSON(w, 200, state.Requests()) })
	mux.HandleFunc("GET /admin/quota", func(w http.ResponseWriter, _ *http.Request) { writeJSON(w, 200, state.QuotaUse()) })
	mux.HandleFunc("GET /admin/faults", func(w http.ResponseWriter, _ *http.Request) {
		state.mu.Lock()
		cfg := state.cfg
		state.mu.Unlock()
		writeJSON(w, 200, cfg)
	})
	mux.HandleFunc("POST /admin/faults", func(w http.ResponseWriter, r *http.Request) {
		var cfg Config
		if err := decode(r, &cfg); err != nil {
			httpError(w, 400, err)
			return
		}
		state.mu.Lock()
		state.setConfig(cfg)
		state.mu.Unlock()
		writeJSON(w, 200, cfg)
	})
	mux.HandleFunc("POST /admin/faults/stop", func(w http.ResponseWriter, r *http.Request) {
		var rule Rule
		if err := decode(r, &rule); err != nil {
			httpError(w, 400, err)
			return
		}
		n := state.StopRules(rule.System, rule.Order)
		if n == 0 {
			httpError(w, 404, fmt.Errorf("no rule of system %q for order %q is firing", rule.System, rule.Order))
			return
		}
		writeJSON(w, 200, map[string]int{"stopped": n})
	})
}

// handleSystems serves the external systems: their effects (made, undone,
// looked up by idempotency key) and the CRM's customer profiles.
func handleSystems(mux *http.ServeMux, state *State) {
	mux.HandleFunc("GET /v1/{system}/effects/{key}", func(w http.ResponseWriter, r *http.Request) {
		sys, ok := systemByName(r.PathValue("system"))
		if !ok {
			httpError(w, 404, errors.New("no such system"))
			return
		}
		state.mu.Lock()
		if state.hit(sys.Name) {
			state.mu.Unlock()
			httpError(w, 503, errors.New("system down"))
			return
		}
		e, found := state.effects[sys.Name+"/"+r.PathValue("key")]
		resp := EffectResponse{System: sys.Name, Op: sys.Op, Key: r.PathValue("key")}
		if found {
			resp = effectResponse(e, false)
		}
		state.mu.Unlock()
		writeJSON(w, 200, resp)
	})
	mux.HandleFunc("GET /v1/{system}/customers/{id}", func(w http.ResponseWriter, r *http.Request) {
		sys, ok := systemByName(r.PathValue("system"))
		if !ok {
			httpError(w, 404, errors.New("no such system"))
			return
		}
		state.mu.Lock()
		down := state.hit(sys.Name)
		state.mu.Unlock()
		if down {
			httpError(w, 503, errors.New("system down"))
			return
		}
		id := r.PathValue("id")
		writeJSON(w, 200, Profile{Customer: id, Tier: tiers[len(id)%len(tiers)]})
	})
	mux.HandleFunc("POST /v1/{system}/{op}", func(w http.ResponseWriter, r *http.Request) {
		sys, ok := systemByName(r.PathValue("system"))
		if !ok {
			httpError(w, 404, errors.New("no such system"))
			return
		}
		state.mu.Lock()
		state.hit(sys.Name)
		state.mu.Unlock()
		key := r.Header.Get(HeaderIdempotencyKey)
		if key == "" {
			httpError(w, 400, errors.New("Idempotency-Key header required"))
			return
		}
		switch op := r.PathValue("op"); {
		case op == sys.Op:
			serveEffect(w, r, state, sys, key)
		case sys.Undo != "" && op == sys.Undo:
			serveUndo(w, r, state, sys, key)
		default:
			httpError(w, 404, errors.New("no such operation"))
		}
	})
}

func serveEffect(w http.ResponseWriter, r *http.Request, state *State, sys System, key string) {
	body, err := io.ReadAll(io.LimitReader(r.Body, maxBody))
	if err != nil {
		httpError(w, 400, err)
		return
	}
	var in struct {
		Order string `json:"order"`
	}
	if len(body) > 0 && json.Unmarshal(body, &in) != nil {
		httpError(w, 400, errors.New("body must be JSON"))
		return
	}
	state.mu.Lock()
	_, seen := state.effects[sys.Name+"/"+key]
	var d decision
	if !seen {
		// A repeat of a committed key always answers; faults hit new work.
		d = state.decide(sys.Name, in.Order, false)
	}
	hang := state.cfg.Hang
	if d.status != 0 || d.hangBefore {
		state.mu.Unlock()
		if d.hangBefore {
			sleep(r.Context(), hang)
			httpError(w, 504, errors.New("timed out"))
			return
		}
		if d.retryAfter > 0 {
			w.Header().Set("Retry-After", strconv.Itoa(int((d.retryAfter+time.Second-1)/time.Second)))
			w.Header().Set(HeaderRetryAfterMS, strconv.FormatInt(d.retryAfter.Milliseconds(), 10))
		}
		httpError(w, d.status, errors.New(http.StatusText(d.status)))
		return
	}
	e := state.apply(sys, key, in.Order, body)
	resp := effectResponse(e, seen)
	state.mu.Unlock()
	if d.hangAfter {
		// Committed, but the caller will give up before it hears so.
		sleep(r.Context(), hang)
	}
	if seen {
		w.Header().Set(HeaderReplayed, "true")
	}
	writeJSON(w, 200, resp)
}

func serveUndo(w http.ResponseWriter, r *http.Request, state *State, sys System, key string) {
	var req CompensateRequest
	if err := decode(r, &req); err != nil || req.Key == "" {
		httpError(w, 400, errors.New(`body must be {"idempotency_key": "<key of the effect to undo>"}`))
		return
	}
	state.mu.Lock()
	defer state.mu.Unlock()
	e, ok := state.effects[sys.Name+"/"+req.Key]
	if !ok {
		// Nothing happened under that key: nothing to undo.
		writeJSON(w, 200, EffectResponse{System: sys.Name, Op: sys.Undo, Key: req.Key})
		return
	}
	e.CompensationRequests++
	if e.Compensated {
		w.Header().Set(HeaderReplayed, "true")
		writeJSON(w, 200, effectResponse(e, true))
		return
	}
	if d := state.decide(sys.Name, e.Order, true); d.undoFails {
		httpError(w, 409, errors.New(sys.Undo+" refused by "+sys.Name))
		return
	}
	e.Compensated, e.CompensationKey, e.CompensatedAt = true, key, time.Now().UTC()
	writeJSON(w, 200, effectResponse(e, false))
}

func effectResponse(e *Effect, replayed bool) EffectResponse {
	return EffectResponse{Applied: !e.Compensated, System: e.System, Op: e.Op, Key: e.Key, Order: e.Order, ResourceID: e.ResourceID, Replayed: replayed}
}

func decode(r *http.Request, v any) error {
	dec := json.NewDecoder(io.LimitReader(r.Body, maxBody))
	return dec.Decode(v)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func httpError(w http.ResponseWriter, status int, err error) {
	writeJSON(w, status, map[string]string{"error": err.Error()})
}

func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}
