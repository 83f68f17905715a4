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

// sessions are the browsers signed in, each as a user with its password
// or as the holder of the configured token. The page never carries a
// secret: a person types it once into the sign-in form, and the browser
// keeps an HttpOnly, SameSite=Strict cookie naming a random session
// instead.
type sessions struct {
	ttl time.Duration
	now func() time.Time

	mu    sync.Mutex
	byID  map[string]session
	order []string
}

// session is one sign-in: who, and until when.
type session struct {
	who principal
	exp time.Time
}

func newSessions(ttl time.Duration) *sessions {
	if ttl <= 0 {
		ttl = SessionTTLDefault
	}
	return &sessions{ttl: ttl, now: time.Now, byID: map[string]session{}}
}

// open starts a session of who and returns its id and expiry.
func (s *sessions) open(who principal) (string, time.Time) {
	b := make([]byte, 32)
	_, _ = rand.Read(b)
	id := hex.EncodeToString(b)
	s.mu.Lock()
	defer s.mu.Unlock()
	exp := s.now().Add(s.ttl)
	s.byID[id] = session{who: who, exp: exp}
	s.order = append(s.order, id)
	for len(s.order) > sessionsMax {
		delete(s.byID, s.order[0])
		s.order = s.order[1:]
	}
	return id, exp
}

// valid is the live session id names, if any.
func (s *sessions) valid(id string) (session, bool) {
	if id == "" {
		return session{}, false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	ss, ok := s.byID[id]
	if ok && s.now().After(ss.exp) {
		delete(s.byID, id)
		return session{}, false
	}
	return ss, ok
}

func (s *sessions) close(id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.byID, id)
}

// sessionOf is the live session of r's cookie, if any, and its id.
func (s *Server) sessionOf(r *http.Request) (string, session, bool) {
	c, err := r.Cookie(SessionCookie)
	if err != nil {
		return "", session{}, false
	}
	ss, ok := s.sessions.valid(c.Value)
	return c.Value, ss, ok
}

var (
	errBadSignIn   = errors.New("wrong token")
	errBadPassword = errors.New("wrong user or password")
)

// apiSignIn takes {"user", "password"} of a user of the users file, or
// {"token"} with the configured token, and opens a session: an HttpOnly,
// SameSite=Strict cookie, good for the session TTL.
func (s *Server) apiSignIn(w http.ResponseWriter, r *http.Request) {
	if err := s.sameOrigin(r); err != nil {
		fail(w, http.StatusForbidden, err)
		return
	}
	var body struct {
		Token    string `json:"token,omitempty"`
		User     string `json:"user,omitempty"`
		Password string `json:"password,omitempty"`
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
	who, why := s.signInAs(body.User, body.Password, body.Token)
	if why != nil {
		// The check stays in flight while it is slowed down: the same
		// address gets no other check meanwhile.
		time.Sleep(failedSignInDelay)
		done(false)
		s.refused(r, "sign-in", why)
		fail(w, http.StatusForbidden, why)
		return
	}
	done(true)
	id, exp := s.sessions.open(who)
	http.SetCookie(w, &http.Cookie{Name: SessionCookie, Value: id, Path: "/", Expires: exp, MaxAge: int(time.Until(exp).Seconds()),
		HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: overTLS(r)})
	writeJSON(w, http.StatusOK, s.stateOf(who, true, exp))
}

// signInAs is who a sign-in with user and password, or with token, is.
func (s *Server) signInAs(user, password, token string) (principal, error) {
	if user != "" {
		u, ok := checkPassword(s.cfg.Users, user, password)
		if !ok {
			return principal{}, errBadPassword
		}
		return principal{name: u.Name, role: u.Role, verified: true}, nil
	}
	if !s.configured || s.cfg.Token == "" || subtle.ConstantTimeCompare([]byte(token), []byte(s.token)) != 1 {
		return principal{}, errBadSignIn
	}
	return tokenHolder, nil
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
	writeJSON(w, http.StatusOK, sessionState{Mode: s.mode()})
}

// overTLS reports whether the browser reached the page over HTTPS: here,
// or through a proxy that terminates TLS and says so. The session cookie
// is then Secure (a forged header only restricts the cookie further).
func overTLS(r *http.Request) bool {
	return r.TLS != nil || strings.EqualFold(r.Header.Get("X-Forwarded-Proto"), "https")
}

// sessionState is what GET /api/session answers: how people sign in
// (mode open: loopback without a configured token or users, nobody
// signs in; token: with the token; users: with a user's name and
// password; proxy: the trusted proxy names them), whether this browser
// is signed in, as whom and with what role.
type sessionState struct {
	Mode      string    `json:"mode"`
	SignedIn  bool      `json:"signed_in"`
	User      string    `json:"user,omitempty"`
	Role      Role      `json:"role,omitempty"`
	ExpiresAt time.Time `json:"expires_at,omitzero"`
}

// mode is how people sign in here.
func (s *Server) mode() string {
	switch {
	case !s.configured:
		return "open"
	case len(s.cfg.Users) > 0 && s.cfg.ProxyHeader == "":
		return "users"
	case s.cfg.ProxyHeader != "":
		return "proxy"
	}
	return "token"
}

func (s *Server) stateOf(who principal, ok bool, exp time.Time) sessionState {
	st := sessionState{Mode: s.mode(), SignedIn: ok, ExpiresAt: exp}
	if ok {
		st.User, st.Role = who.name, who.role
	}
	return st
}

func (s *Server) apiSession(w http.ResponseWriter, r *http.Request) {
	who, ok, err := s.principalOf(r)
	if err != nil {
		fail(w, authStatus(w, err), err)
		return
	}
	var exp time.Time
	if _, ss, live := s.sessionOf(r); live {
		exp = ss.exp
	}
	writeJSON(w, http.StatusOK, s.stateOf(who, ok, exp))
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
