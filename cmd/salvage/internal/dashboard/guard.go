package dashboard

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"
)

// Token guessing is bounded: a client address gets one check of a token
// at a time, and a lockout that doubles after every failuresPerLockout
// wrong tokens in a row; all addresses together get checksMax checks at
// once and a lockout that doubles while wrong tokens keep arriving faster
// than globalFailures a minute. A refused attempt is answered 429 at
// once, its token never compared; every refusal is logged (address,
// reason, how long it is locked) without the token.
const (
	failuresPerLockout = 5
	lockoutFirst       = time.Second
	lockoutMax         = 10 * time.Minute
	checksMax          = 4
	globalFailures     = 30
	// guardAddrsMax bounds the addresses remembered; the one seen least
	// recently goes first.
	guardAddrsMax = 10_000
)

// errThrottled is a token not checked: its client, or every client, made
// too many wrong guesses lately, or has one being checked now.
var errThrottled = errors.New("too many attempts with a token: try again later")

// throttledError says when to try again.
type throttledError struct {
	reason string
	after  time.Duration
}

func (e *throttledError) Error() string {
	return fmt.Sprintf("%v (%s; retry after %s)", errThrottled, e.reason, e.after.Round(time.Second))
}

func (e *throttledError) Is(target error) bool { return target == errThrottled }

// addrState is what the guard knows of one client address.
type addrState struct {
	failures, lockouts int
	lockedUntil        time.Time
	checking           bool
	seen               time.Time
}

type guard struct {
	now func() time.Time

	mu       sync.Mutex
	addrs    map[string]*addrState
	checking int
	// recent are the times of the latest wrong tokens, from any address,
	// at most globalFailures of them.
	recent         []time.Time
	globalUntil    time.Time
	globalLockouts int
}

func newGuard() *guard { return &guard{now: time.Now, addrs: map[string]*addrState{}} }

// admit lets a check of a token from addr go ahead, or refuses it with a
// *throttledError. An admitted check must end with done(ok).
func (g *guard) admit(addr string) (done func(ok bool), err error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	now := g.now()
	a := g.addrs[addr]
	if a == nil {
		g.evict()
		a = &addrState{}
		g.addrs[addr] = a
	}
	a.seen = now
	switch {
	case now.Before(g.globalUntil):
		return nil, &throttledError{"every client is locked out after many wrong tokens", g.globalUntil.Sub(now)}
	case now.Before(a.lockedUntil):
		return nil, &throttledError{"this address is locked out after wrong tokens", a.lockedUntil.Sub(now)}
	case a.checking:
		return nil, &throttledError{"a token from this address is being checked", time.Second}
	case g.checking >= checksMax:
		return nil, &throttledError{"too many tokens are being checked", time.Second}
	}
	a.checking = true
	g.checking++
	return func(ok bool) { g.done(a, ok) }, nil
}

func (g *guard) done(a *addrState, ok bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	a.checking = false
	g.checking--
	now := g.now()
	if ok {
		a.failures, a.lockouts = 0, 0
		g.globalLockouts = 0
		return
	}
	if a.failures++; a.failures >= failuresPerLockout {
		a.failures = 0
		a.lockedUntil = now.Add(backoff(a.lockouts))
		a.lockouts++
	}
	g.recent = append(g.recent, now)
	if len(g.recent) > globalFailures {
		g.recent = g.recent[1:]
	}
	if len(g.recent) == globalFailures && now.Sub(g.recent[0]) < time.Minute {
		g.globalUntil = now.Add(backoff(g.globalLockouts))
		g.globalLockouts++
		g.recent = g.recent[:0]
	}
}

// backoff is the n-th lockout's length: lockoutFirst doubled n times, at
// most lockoutMax.
func backoff(n int) time.Duration {
	return min(lockoutFirst<<min(n, 20), lockoutMax)
}

// evict forgets the address seen least recently when the map is full,
// unless its check is running.
func (g *guard) evict() {
	if len(g.addrs) < guardAddrsMax {
		return
	}
	var oldest string
	var at time.Time
	for k, a := range g.addrs {
		if !a.checking && (oldest == "" || a.seen.Before(at)) {
			oldest, at = k, a.seen
		}
	}
	delete(g.addrs, oldest)
}

// clientAddr is the address a request came from: the connection's peer
// (a header saying otherwise is not believed: anyone can send one).
func clientAddr(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return r.RemoteAddr
	}
	return host
}

// authStatus is the status of a refused authorization: 429 (with
// Retry-After set on w) for a throttled token, else 403.
func authStatus(w http.ResponseWriter, err error) int {
	var te *throttledError
	if errors.As(err, &te) {
		w.Header().Set("Retry-After", strconv.Itoa(int(max(te.after.Round(time.Second), time.Second)/time.Second)))
		return http.StatusTooManyRequests
	}
	return http.StatusForbidden
}
