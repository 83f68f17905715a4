package dashboard

import (
	"context"
	"crypto/rand"
	"embed"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"html/template"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"runtime/debug"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/rs/zerolog"

	"github.com/salvagehq/salvage"
)

// Defaults.
const (
	// AddrDefault is where the dashboard listens.
	AddrDefault = "127.0.0.1:7070"
	// TokenEnv names the environment variable holding the token.
	TokenEnv = "SALVAGE_HTTP_TOKEN"
	// TokenHeader carries the token on a mutation.
	TokenHeader = "X-Salvage-Token"
)

// ErrNeedsToken is returned by Listen for a non-loopback address where
// nobody would sign in (no token, no users, no trusted proxy): the page
// can replay and resolve envelopes.
var ErrNeedsToken = errors.New("dashboard: a non-loopback address needs --http-token (or " + TokenEnv + "), --http-users or --http-proxy-header")

//go:embed static
var static embed.FS

var page = template.Must(template.ParseFS(static, "static/index.html"))

// Config configures the dashboard.
type Config struct {
	// Addr is the listen address. Default AddrDefault.
	Addr string
	// Token authorizes mutations: a script sends it in X-Salvage-Token,
	// a person signs in with it once (the page never carries it). Empty
	// on loopback mints a random one for this process, which the page
	// carries; required elsewhere.
	Token string
	// SessionTTL is how long a sign-in lasts. Default SessionTTLDefault.
	SessionTTL time.Duration
	// Users sign in with their own name and password, each with a role
	// (LoadUsers); they also give the people the proxy names their role.
	Users []User
	// ProxyHeader names the header in which a proxy the operator runs in
	// front of the dashboard (oauth2-proxy and the like: X-Forwarded-User,
	// X-Forwarded-Email) says who the person is, once it authenticated
	// them. It counts only on requests from ProxyFrom's addresses; a
	// request from anywhere else carrying it is refused.
	ProxyHeader string
	// ProxyFrom are the addresses the proxy connects from. Required with
	// ProxyHeader.
	ProxyFrom []netip.Prefix
	// ProxyRole is the role of a person the proxy names whom Users do not
	// list. Default RoleViewer.
	ProxyRole Role
	// AllowedHosts are host names (or IPs) served besides the listen
	// address, localhost, 127.0.0.1 and ::1; a request with any other
	// Host header gets 421 (DNS rebinding). Default none.
	AllowedHosts []string
	// Logger receives request errors. Default zerolog.Nop().
	Logger *zerolog.Logger
}

// Server is the dashboard's HTTP server.
type Server struct {
	cfg    Config
	l      net.Listener
	srv    *http.Server
	sum    *summarizer
	client *salvage.Client
	log    zerolog.Logger
	token  string
	// configured is set when people sign in (a token was given, users or
	// a trusted proxy): the page never carries a token.
	configured bool
	sessions   *sessions
	// guard bounds guesses at the token (sign-in and the header alike).
	guard *guard
	hosts *hostGuard
	hist  history
}

// Listen binds the dashboard's address. It refuses a non-loopback address
// without a token (ErrNeedsToken).
func Listen(js jetstream.JetStream, client *salvage.Client, cfg Config) (*Server, error) {
	if cfg.Addr == "" {
		cfg.Addr = AddrDefault
	}
	host, _, err := net.SplitHostPort(cfg.Addr)
	if err != nil {
		return nil, fmt.Errorf("dashboard: address %q: %w", cfg.Addr, err)
	}
	loopback := host == "localhost"
	if ip := net.ParseIP(host); ip != nil && ip.IsLoopback() {
		loopback = true
	}
	signIn := cfg.Token != "" || len(cfg.Users) > 0 || cfg.ProxyHeader != ""
	if !loopback && !signIn {
		return nil, ErrNeedsToken
	}
	if err := cfg.checkSignIn(); err != nil {
		return nil, err
	}
	token := cfg.Token
	if token == "" {
		b := make([]byte, 16)
		_, _ = rand.Read(b)
		token = hex.EncodeToString(b)
	}
	l, err := net.Listen("tcp", cfg.Addr)
	if err != nil {
		return nil, fmt.Errorf("dashboard: listen %s: %w", cfg.Addr, err)
	}
	log := zerolog.Nop()
	if cfg.Logger != nil {
		log = *cfg.Logger
	}
	s := &Server{cfg: cfg, l: l, sum: &summarizer{calls: newCallStats(), jobs: newJobIndex(), envs: newEnvelopeStats(), breakers: &breakerPoll{}},
		client: client, log: log.With().Str("role", "dashboard").Logger(), token: token,
		configured: signIn, sessions: newSessions(cfg.SessionTTL), guard: newGuard()}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collector{s: s.sum}, s.sum.calls.latency, s.sum.calls.limitWait, s.sum.jobs)
	mux := http.NewServeMux()
	mux.HandleFunc("GET /{$}", s.index)
	// A job's, a chunk's and an envelope's own pages: the same page,
	// which reads its address.
	mux.HandleFunc("GET /jobs/{id}", s.index)
	mux.HandleFunc("GET /jobs/{id}/chunks/{chunk}", s.index)
	mux.HandleFunc("GET /envelopes/{id}", s.index)
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
		defer cancel()
		if err := client.Health(ctx); err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		_, _ = w.Write([]byte("ok\n"))
	})
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	mux.HandleFunc("GET /api/session", s.apiSession)
	mux.HandleFunc("POST /api/session", s.apiSignIn)
	mux.HandleFunc("DELETE /api/session", s.apiSignOut)
	mux.HandleFunc("GET /api/summary", s.reads(s.apiSummary))
	mux.HandleFunc("GET /api/history", s.reads(s.apiHistory))
	mux.HandleFunc("GET /api/jobs", s.reads(s.apiJobs))
	mux.HandleFunc("GET /api/jobs/{id}", s.reads(s.apiJob))
	mux.HandleFunc("GET /api/jobs/{id}/chunks/{chunk}/trace", s.reads(s.apiChunkTrace))
	mux.HandleFunc("GET /api/jobs/{id}/actions", s.reads(s.apiJobActions))
	mux.HandleFunc("POST /api/jobs/{id}/cancel", s.apiCancelJob)
	mux.HandleFunc("GET /api/envelopes", s.reads(s.apiEnvelopes))
	mux.HandleFunc("GET /api/envelopes/{id}", s.reads(s.apiEnvelope))
	mux.HandleFunc("POST /api/envelopes/{id}/{action}", s.apiMutate)
	mux.HandleFunc("POST /api/bulk", s.apiBulk)
	mux.HandleFunc("GET /api/pipelines", s.reads(s.apiPipelines))
	mux.HandleFunc("GET /api/workers", s.reads(s.apiWorkers))
	mux.HandleFunc("POST /api/pipelines/{name}/{action}", s.apiPause)
	mux.HandleFunc("GET /api/approvals", s.reads(s.apiApprovals))
	mux.HandleFunc("GET /api/audit", s.reads(s.apiAudit))
	mux.HandleFunc("GET /api/held", s.reads(s.apiHeld))
	mux.HandleFunc("POST /api/approvals/{job}/{chunk}/{action}", s.apiDecide)
	s.hosts = newHostGuard(cfg.Addr, cfg.AllowedHosts, securityHeaders(mux))
	s.srv = &http.Server{Handler: s.hosts, ReadHeaderTimeout: 5 * time.Second}
	return s, nil
}

// URL is the dashboard's base URL.
func (s *Server) URL() string { return "http://" + s.l.Addr().String() }

// Run serves until ctx ends, following jobs, envelopes and the journal
// through the client's watches. It blocks, and returns only once every
// goroutine it started has ended.
func (s *Server) Run(ctx context.Context) error {
	ctx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer wg.Wait()
	defer stop()
	// One error each from the three watches and the server, at most: a
	// watch that cannot go on (the deployment not provisioned, the
	// connection closed) ends the dashboard, which would show nothing.
	errc := make(chan error, 4)
	watch := func(w func(context.Context) error) {
		wg.Go(func() {
			if err := w(ctx); err != nil {
				errc <- fmt.Errorf("dashboard: %w", err)
			}
		})
	}
	watch(func(ctx context.Context) error { return s.client.CallWatch(ctx, s.sum.calls.update) })
	watch(func(ctx context.Context) error { return s.client.JobWatch(ctx, s.sum.jobs.update) })
	watch(func(ctx context.Context) error { return s.client.EnvelopeWatch(ctx, s.sum.envs.update) })
	wg.Go(func() { s.sum.breakers.run(ctx, s.client, s.log) })
	wg.Go(func() { s.sample(ctx) })
	wg.Go(func() { s.release(ctx) })
	go func() { errc <- s.srv.Serve(s.l) }()
	var err error
	select {
	case err = <-errc:
	case <-ctx.Done():
	}
	stop()
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if serr := s.srv.Shutdown(sctx); serr != nil && !errors.Is(serr, http.ErrServerClosed) && err == nil {
		err = serr
	}
	return err
}

// release hands the memory the watches' catch-up went through back to the
// operating system, once, when the job and envelope watches have caught
// up: the server sends a bucket's records faster than they are decoded,
// so at start the connection holds up to all of them at once (about 60
// MB for 100,000 envelopes), while what the dashboard keeps of them is a
// few bytes each.
func (s *Server) release(ctx context.Context) {
	for _, ready := range []chan struct{}{s.sum.jobs.gens.ready, s.sum.envs.gens.ready} {
		select {
		case <-ctx.Done():
			return
		case <-ready:
		}
	}
	debug.FreeOSMemory()
}

func securityHeaders(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("X-Frame-Options", "DENY")
		h.Set("Content-Security-Policy", "default-src 'self'; script-src 'self' 'unsafe-inline'; style-src 'self' 'unsafe-inline'")
		next.ServeHTTP(w, r)
	})
}

func (s *Server) index(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	// A configured token is never served: people sign in. Only the
	// random token of a loopback process without one rides in the page
	// (same-origin policy keeps other sites from reading it).
	token := ""
	if !s.configured {
		token = s.token
	}
	_ = page.Execute(w, map[string]string{"Token": token})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func fail(w http.ResponseWriter, status int, err error) {
	writeJSON(w, status, map[string]string{"error": err.Error()})
}

func (s *Server) apiSummary(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, s.sum.summary())
}

// apiEnvelopes lists envelope records a page at a time from SALVAGE_INDEX
// (Client.EnvelopeList: O(log n + page) whatever the DLQ holds), filtered
// by category, status, job and min_age (in its status at least that long),
// in the order they entered their status, or with newest=1 the latest
// first; offset and limit choose the page.
func (s *Server) apiEnvelopes(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	f := salvage.EnvelopeFilter{Category: salvage.Category(q.Get("category")), Status: salvage.EnvelopeStatus(q.Get("status")), Job: q.Get("job")}
	page, err := pageOf(q)
	if err != nil {
		fail(w, http.StatusBadRequest, err)
		return
	}
	if a := q.Get("min_age"); a != "" {
		d, err := time.ParseDuration(a)
		if err != nil {
			fail(w, http.StatusBadRequest, fmt.Errorf("min_age: %w", err))
			return
		}
		f.MinAge = d
	}
	if err := f.Validate(); err != nil {
		fail(w, statusOf(err), err)
		return
	}
	f.Newest = q.Get("newest") == "1"
	list, err := s.client.EnvelopeList(r.Context(), f, &page)
	if err != nil {
		fail(w, statusOf(err), err)
		return
	}
	writeJSON(w, http.StatusOK, list)
}

func (s *Server) apiEnvelope(w http.ResponseWriter, r *http.Request) {
	d, err := s.client.EnvelopeGet(r.Context(), r.PathValue("id"))
	if err != nil {
		fail(w, statusOf(err), err)
		return
	}
	writeJSON(w, http.StatusOK, d)
}

// apiMutate replays, resolves or acknowledges an envelope: POST only, with
// the token, from this origin.
func (s *Server) apiMutate(w http.ResponseWriter, r *http.Request) {
	ctx, err := s.authorize(r)
	if err != nil {
		fail(w, authStatus(w, err), err)
		return
	}
	id, by := r.PathValue("id"), ""
	var note struct {
		Note   string `json:"note"`
		Reason string `json:"reason"`
	}
	if err := decodeBody(w, r, &note); err != nil {
		fail(w, http.StatusBadRequest, err)
		return
	}
	ctx = salvage.WithReason(ctx, note.Reason)
	var rec *salvage.EnvelopeRecord
	switch r.PathValue("action") {
	case "replay":
		rec, err = s.client.EnvelopeReplay(ctx, id, by)
	case "resolve":
		rec, err = s.client.EnvelopeResolve(ctx, id, by, note.Note)
	case "ack":
		rec, err = s.client.EnvelopeAck(ctx, id, by)
	default:
		fail(w, http.StatusNotFound, errors.New("unknown action: want replay, resolve or ack"))
		return
	}
	if err != nil {
		fail(w, statusOf(err), err)
		return
	}
	writeJSON(w, http.StatusOK, rec)
}

var (
	errNoToken     = errors.New("sign in, or send the token in " + TokenHeader)
	errCrossOrigin = errors.New("cross-origin request refused")
)

// sameOrigin checks that a browser request comes from this origin
// (Origin, else Sec-Fetch-Site). The Host was checked against the allowed
// names before; the Origin must be that same allowed host.
func (s *Server) sameOrigin(r *http.Request) error {
	if origin := r.Header.Get("Origin"); origin != "" {
		u, err := url.Parse(origin)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || !strings.EqualFold(u.Host, r.Host) || !s.hosts.ok(u.Host) {
			return errCrossOrigin
		}
	} else if site := r.Header.Get("Sec-Fetch-Site"); site != "" && site != "same-origin" && site != "none" {
		return errCrossOrigin
	}
	return nil
}

func statusOf(err error) int { return salvage.ErrorStatus(err) }
