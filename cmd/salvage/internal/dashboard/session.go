package dashboard

import (
	"crypto/rand"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"time"
)

// Sign-in defaults.
const (
	// SessionTTLDefault is how long a sign-in lasts.
	SessionTTLDefault = 12 * time.Hour
	// SessionCookie names the session cookie (HttpOnly, SameSite=Strict).
	SessionCookie = "salvage_session"
	// sessionsMax bounds the sessions kept; the oldest goes first.
	sessionsMax = 1000
	// failedSignInDelay slows a guess at the token down.
	failedSignInDelay = 250 * time.Millisecond
)

// sessions are the browsers signed in with the configured token. The
// page never carries the token: a person types it once into the sign-in
// form, and the browser keeps an HttpOnly, SameSite=Strict cookie naming
// a random session instead.
type sessions struct {
	ttl time.Duration
	now func() time.Time

	mu    sync.Mutex
	byID  map[string]time.Time // session id -> expiry
	order []string
}

func newSessions(ttl time.Duration) *sessions {
	if ttl <= 0 {
		ttl = SessionTTLDefault
	}
	return &sessions{ttl: ttl, now: time.Now, byID: map[string]time.Time{}}
}

// open starts a session and returns its id and expiry.
func (s *sessions) open() (string, time.Time) {
	b := make([]byte, 32)
	_, _ = rand.Read(b)
	id := hex.EncodeToString(b)
	s.mu.Lock()
	defer s.mu.Unlock()
	exp := s.now().Add(s.ttl)
	s.byID[id] = exp
	s.order = append(s.order, id)
	for len(s.order) > sessionsMax {
		delete(s.byID, s.order[0])
		s.order = s.order[1:]
	}
	return id, exp
}

// valid reports whether id names a live session, and until when.
func (s *sessions) valid(id string) (time.Time, bool) {
	if id == "" {
		return time.Time{}, false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	exp, ok := s.byID[id]
	if ok && s.now().After(exp) {
		delete(s.byID, id)
		return time.Time{}, false
	}
	return exp, ok
}

func (s *sessions) close(id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.byID, id)
}

// sessionOf is the live session of r's cookie, if any.
func (s *Server) sessionOf(r *http.Request) (string, time.Time, bool) {
	c, err := r.Cookie(SessionCookie)
	if err != nil {
		return "", time.Time{}, false
	}
	exp, ok := s.sessions.valid(c.Value)
	return c.Value, exp, ok
}

var errBadSignIn = errors.New("wrong token")

// apiSignIn takes {"token"} and, when it is the configured token, opens a
// session: an HttpOnly, SameSite=Strict cookie, good for the session TTL.
func (s *Server) apiSignIn(w http.ResponseWriter, r *http.Request) {
	if err := s.sameOrigin(r); err != nil {
		fail(w, http.StatusForbidden, err)
		return
	}
	var body struct {
		Token string `json:"token"`
	}
	if err := decodeBody(w, r, &body); err != nil {
		fail(w, http.StatusBadRequest, err)
		return
	}
	done, err := s.guard.admit(clientAddr(r))
	if err != nil {
		s.refused(r, "sign-in", err)
		fail(w, authStatus(w, err), err)
		return
	}
	if !s.configured || subtle.ConstantTimeCompare([]byte(body.Token), []byte(s.token)) != 1 {
		// The check stays in flight while it is slowed down: the same
		// address gets no other check meanwhile.
		time.Sleep(failedSignInDelay)
		done(false)
		s.refused(r, "sign-in", errBadSignIn)
		fail(w, http.StatusForbidden, errBadSignIn)
		return
	}
	done(true)
	id, exp := s.sessions.open()
	http.SetCookie(w, &http.Cookie{Name: SessionCookie, Value: id, Path: "/", Expires: exp, MaxAge: int(time.Until(exp).Seconds()),
		HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: overTLS(r)})
	writeJSON(w, http.StatusOK, sessionState{Mode: "token", SignedIn: true, ExpiresAt: exp})
}

// apiSignOut ends the request's session and clears its cookie.
func (s *Server) apiSignOut(w http.ResponseWriter, r *http.Request) {
	if err := s.sameOrigin(r); err != nil {
		fail(w, http.StatusForbidden, err)
		return
	}
	if id, _, ok := s.sessionOf(r); ok {
		s.sessions.close(id)
	}
	http.SetCookie(w, &http.Cookie{Name: SessionCookie, Value: "", Path: "/", MaxAge: -1, HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: overTLS(r)})
	writeJSON(w, http.StatusOK, sessionState{Mode: "token"})
}

// overTLS reports whether the browser reached the page over HTTPS: here,
// or through a proxy that terminates TLS and says so. The session cookie
// is then Secure (a forged header only restricts the cookie further).
func overTLS(r *http.Request) bool {
	return r.TLS != nil || strings.EqualFold(r.Header.Get("X-Forwarded-Proto"), "https")
}

// sessionState is what GET /api/session answers: whether mutations need a
// sign-in (mode token) or not (mode open: loopback without a configured
// token), and whether this browser is signed in.
type sessionState struct {
	Mode      string    `json:"mode"`
	SignedIn  bool      `json:"signed_in"`
	ExpiresAt time.Time `json:"expires_at,omitzero"`
}

func (s *Server) apiSession(w http.ResponseWriter, r *http.Request) {
	if !s.configured {
		writeJSON(w, http.StatusOK, sessionState{Mode: "open", SignedIn: true})
		return
	}
	_, exp, ok := s.sessionOf(r)
	writeJSON(w, http.StatusOK, sessionState{Mode: "token", SignedIn: ok, ExpiresAt: exp})
}

// bodyMax bounds a mutation's body.
const bodyMax = 4096

// decodeBody reads r's JSON body into v: at most bodyMax bytes, one
// object, no unknown field; an empty body is an empty object.
func decodeBody(w http.ResponseWriter, r *http.Request, v any) error {
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, bodyMax))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		if errors.Is(err, io.EOF) {
			return nil
		}
		return fmt.Errorf("%w: %w", errBadBody, err)
	}
	if dec.More() {
		return fmt.Errorf("%w: trailing data after the object", errBadBody)
	}
	return nil
}

// errBadBody is a mutation's body that is not one small JSON object of
// the fields it takes.
var errBadBody = errors.New("malformed request body")

// refused logs a refused token: where it came from and why, never the
// token itself.
func (s *Server) refused(r *http.Request, what string, why error) {
	s.log.Warn().Str("remote", clientAddr(r)).Str("path", r.URL.Path).Str("attempt", what).Err(why).Msg("token refused")
}
