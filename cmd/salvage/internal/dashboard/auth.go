package dashboard

import (
	"context"
	"crypto/subtle"
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"slices"
	"strings"
	"time"

	"github.com/salvagehq/salvage"
)

// principal is who a request acts as: a user signed in with a password,
// a person the trusted proxy names, the holder of the token, or — on a
// loopback dashboard nobody signs in to — the page itself.
type principal struct {
	name string
	role Role
	// verified: the name was authenticated (the user's own password,
	// the proxy's header), not shared (the token) or assumed.
	verified bool
}

// tokenHolder is whoever sends the configured token: a script, or a
// person who signed in with it; an operator, by no name of its own.
var tokenHolder = principal{name: "token", role: RoleOperator}

// pageOwner is the page of a loopback dashboard nobody signs in to.
var pageOwner = principal{name: "dashboard", role: RoleOperator}

// actor is p as the audit records it.
func (p principal) actor() salvage.Actor {
	return salvage.Actor{Name: p.name, Via: salvage.ViaDashboard, Role: string(p.role), Verified: p.verified}
}

var (
	errViewer   = errors.New("your role is viewer: an operator may do this")
	errNotProxy = errors.New("a sign-in header from an address that is not the trusted proxy's")
)

// principalOf is who r acts as, if anyone: the trusted proxy's user (the
// header counts only from ProxyFrom's addresses: from anywhere else the
// request is refused), the holder of the token in X-Salvage-Token (checked
// as a sign-in is: one check at a time per address, locked out after
// wrong ones), or a signed-in session's user.
func (s *Server) principalOf(r *http.Request) (principal, bool, error) {
	if !s.configured {
		return pageOwner, true, nil
	}
	if h := s.cfg.ProxyHeader; h != "" {
		if name := r.Header.Get(h); name != "" {
			if !s.fromProxy(r) {
				s.refused(r, h, errNotProxy)
				return principal{}, false, errNotProxy
			}
			return s.proxied(name), true, nil
		}
	}
	if got := r.Header.Get(TokenHeader); got != "" {
		done, err := s.guard.admit(clientAddr(r))
		if err != nil {
			s.refused(r, TokenHeader, err)
			return principal{}, false, err
		}
		if subtle.ConstantTimeCompare([]byte(got), []byte(s.token)) != 1 {
			time.Sleep(failedSignInDelay)
			done(false)
			s.refused(r, TokenHeader, errBadSignIn)
			return principal{}, false, nil
		}
		done(true)
		return tokenHolder, true, nil
	}
	if _, ss, ok := s.sessionOf(r); ok {
		return ss.who, true, nil
	}
	return principal{}, false, nil
}

// fromProxy reports whether r came from one of the proxy's addresses.
func (s *Server) fromProxy(r *http.Request) bool {
	a, err := netip.ParseAddr(clientAddr(r))
	if err != nil {
		return false
	}
	a = a.Unmap()
	return slices.ContainsFunc(s.cfg.ProxyFrom, func(p netip.Prefix) bool { return p.Contains(a) })
}

// proxied is the person the proxy names: the role the users file gives
// the name, else ProxyRole. A name is clipped to userNameMax printable
// characters.
func (s *Server) proxied(name string) principal {
	name = strings.Map(func(r rune) rune {
		if r < ' ' || r == 0x7f {
			return -1
		}
		return r
	}, name)
	if len(name) > userNameMax {
		name = name[:userNameMax]
	}
	role := s.cfg.ProxyRole
	if i := slices.IndexFunc(s.cfg.Users, func(u User) bool { return u.Name == name }); i >= 0 {
		role = s.cfg.Users[i].Role
	}
	return principal{name: name, role: role, verified: true}
}

// reads guards a view of jobs, envelopes, journal rows and workers: where
// people sign in only a signed-in one (any role) or a script sending the
// token sees them (401 otherwise); a loopback process nobody signs in to
// serves them to its page.
func (s *Server) reads(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		_, ok, err := s.principalOf(r)
		if err != nil {
			fail(w, authStatus(w, err), err)
			return
		}
		if !ok {
			fail(w, http.StatusUnauthorized, errNoToken)
			return
		}
		h(w, r)
	}
}

// authorize checks that a mutation comes from this origin, from someone
// signed in (or sending the token) whose role is operator, and returns
// the request's context carrying who, for the audit.
func (s *Server) authorize(r *http.Request) (context.Context, error) {
	if err := s.sameOrigin(r); err != nil {
		return nil, err
	}
	who, ok, err := s.principalOf(r)
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, errNoToken
	}
	if who.role != RoleOperator {
		return nil, errViewer
	}
	return salvage.WithActor(r.Context(), who.actor()), nil
}

// checkSignIn refuses a sign-in configuration that cannot work: a proxy
// header with no proxy address, a role no user can have.
func (c *Config) checkSignIn() error {
	if c.ProxyHeader != "" && len(c.ProxyFrom) == 0 {
		return errors.New("dashboard: --http-proxy-header needs --http-proxy-from, the proxy's addresses")
	}
	if c.ProxyRole == "" {
		c.ProxyRole = RoleViewer
	}
	if c.ProxyRole != RoleViewer && c.ProxyRole != RoleOperator {
		return fmt.Errorf("dashboard: proxy role %q: want %s or %s", c.ProxyRole, RoleViewer, RoleOperator)
	}
	for _, u := range c.Users {
		if err := u.Check(); err != nil {
			return fmt.Errorf("%w: %w", ErrBadUsers, err)
		}
	}
	return nil
}
