package natsconf

import (
	"context"
	"errors"
	"fmt"
	"net"
	neturl "net/url"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/jsm.go/natscontext"
	"github.com/nats-io/nats.go"
)

// URLDefault is where commands connect when neither --server nor NATS_URL
// says otherwise.
const URLDefault = "nats://127.0.0.1:4222"

// ConnectConfig says how to reach a NATS deployment. Its fields mirror the
// `nats` CLI's connection flags so a NATS user's habits carry over.
type ConnectConfig struct {
	// URL is a comma-separated server list. Empty means $NATS_URL, else
	// URLDefault.
	URL string
	// Name is the connection name shown in server monitoring.
	Name string
	// Creds is a credentials file (JWT + nkey seed).
	Creds string
	// NKey is an nkey seed file.
	NKey string
	// User and Password authenticate with a user name (or a token when
	// Password is empty).
	User, Password string
	// TLSCert, TLSKey and TLSCA configure TLS client authentication and the
	// trusted roots.
	TLSCert, TLSKey, TLSCA string
	// Context names a `nats` CLI context (~/.config/nats/context/<name>.json)
	// to connect with; empty means $NATS_CONTEXT, else none. Explicit
	// fields above override what the context says.
	Context string
	// NoContext ignores Context and $NATS_CONTEXT: a process connecting to
	// the server it embeds must not bring another deployment's
	// credentials or TLS.
	NoContext bool
	// Wait keeps retrying the first connection until the server is there,
	// instead of failing at once. Long-running roles set it.
	Wait bool
	// OnConnectError, when set, hears every failed connection attempt
	// (the first ones under Wait, and reconnects), for messages that say
	// why a server cannot be reached.
	OnConnectError func(error)
	// InboxPrefix replaces _INBOX as the prefix of this connection's
	// reply subjects (nats.CustomInboxPrefix), so that permissions can
	// give each user its own replies only (_INBOX_<user>.>). Empty keeps
	// _INBOX, or what the nats CLI context says.
	InboxPrefix string
	// OnPermissionViolation, when set, hears the server refuse this user
	// a publish or a subscription (an error wrapping
	// nats.ErrPermissionViolation, naming the subject). A refused request
	// is otherwise only a request nobody answers.
	OnPermissionViolation func(error)
}

// ContextName is the nats CLI context in force: none with NoContext,
// else Context, else $NATS_CONTEXT, else none.
func (c ConnectConfig) ContextName() string {
	if c.NoContext {
		return ""
	}
	if c.Context != "" {
		return c.Context
	}
	return os.Getenv("NATS_CONTEXT")
}

// ResolveURL applies the precedence --server, then the nats CLI context's
// servers, then NATS_URL, then URLDefault.
func (c ConnectConfig) ResolveURL() string {
	if c.URL != "" {
		return c.URL
	}
	if name := c.ContextName(); name != "" {
		if nctx, err := natscontext.New(name, true); err == nil {
			return nctx.ServerURL()
		}
	}
	if u := os.Getenv("NATS_URL"); u != "" {
		return u
	}
	return URLDefault
}

// Connect opens a connection that reconnects forever with backoff: a lost
// server is an infrastructure error to wait out, never a reason to exit.
// It fails at once when the server cannot be reached and Wait is false.
func Connect(c ConnectConfig) (*nats.Conn, error) {
	var opts []nats.Option
	if name := c.ContextName(); name != "" {
		nctx, err := natscontext.New(name, true)
		if err != nil {
			return nil, fmt.Errorf("natsconf: nats context %q: %w", name, err)
		}
		// The context's credentials, TLS and inbox prefix first: the
		// explicit settings below come later and win.
		if opts, err = nctx.NATSOptions(); err != nil {
			return nil, fmt.Errorf("natsconf: nats context %q: %w", name, err)
		}
	}
	opts = append(opts,
		nats.Name(c.Name),
		nats.MaxReconnects(-1),
		nats.ReconnectWait(250*time.Millisecond),
		nats.ReconnectJitter(250*time.Millisecond, time.Second),
		nats.Timeout(5*time.Second),
		// Async errors (slow consumer, permission) are reported by the
		// callers that care; the default handler prints to stderr.
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
			if c.OnPermissionViolation != nil && errors.Is(err, nats.ErrPermissionViolation) {
				c.OnPermissionViolation(err)
			}
		}),
	)
	if c.Wait {
		opts = append(opts, nats.RetryOnFailedConnect(true))
	}
	if c.InboxPrefix != "" {
		opts = append(opts, nats.CustomInboxPrefix(c.InboxPrefix))
	}
	if c.OnConnectError != nil {
		opts = append(opts, nats.ReconnectErrHandler(func(_ *nats.Conn, err error) { c.OnConnectError(err) }))
	}
	if c.Creds != "" {
		opts = append(opts, nats.UserCredentials(c.Creds))
	}
	if c.NKey != "" {
		o, err := nats.NkeyOptionFromSeed(c.NKey)
		if err != nil {
			return nil, fmt.Errorf("natsconf: nkey %s: %w", c.NKey, err)
		}
		opts = append(opts, o)
	}
	switch {
	case c.User != "" && c.Password != "":
		opts = append(opts, nats.UserInfo(c.User, c.Password))
	case c.User != "":
		opts = append(opts, nats.Token(c.User))
	}
	if c.TLSCert != "" || c.TLSKey != "" {
		opts = append(opts, nats.ClientCert(c.TLSCert, c.TLSKey))
	}
	if c.TLSCA != "" {
		opts = append(opts, nats.RootCAs(c.TLSCA))
	}
	url := c.ResolveURL()
	nc, err := nats.Connect(url, opts...)
	if errors.Is(err, nats.ErrNoServers) {
		// nats.go hides why: say what a plain dial of each server says.
		return nil, fmt.Errorf("natsconf: connect %s: %w (%s)", url, err, dialProbe(url))
	}
	if err != nil {
		return nil, fmt.Errorf("natsconf: connect %s: %w", url, err)
	}
	return nc, nil
}

// dialProbe dials each server of a comma-separated URL list and reports
// why none answered, for an error message.
func dialProbe(urls string) string {
	var out []string
	for _, u := range strings.Split(urls, ",") {
		pu, err := neturl.Parse(strings.TrimSpace(u))
		if err != nil || pu.Host == "" {
			out = append(out, fmt.Sprintf("%q is not a server URL", u))
			continue
		}
		host := pu.Host
		if pu.Port() == "" {
			host = net.JoinHostPort(pu.Hostname(), "4222")
		}
		conn, err := net.DialTimeout("tcp", host, 2*time.Second)
		if err != nil {
			out = append(out, err.Error())
			continue
		}
		_ = conn.Close()
		out = append(out, host+" accepts TCP but the NATS handshake failed (TLS or authentication?)")
	}
	return strings.Join(out, "; ")
}

// ConnectTimeoutDefault is how long `salvage up` waits for a deployment it
// joins to become reachable before giving up.
const ConnectTimeoutDefault = time.Minute

// LastConnError keeps the latest failed connection attempt; its Record is
// a ConnectConfig.OnConnectError. It is safe for concurrent use.
type LastConnError struct {
	mu  sync.Mutex
	err error
}

// Record remembers err.
func (l *LastConnError) Record(err error) {
	l.mu.Lock()
	l.err = err
	l.mu.Unlock()
}

// Err returns the latest error recorded, or nil.
func (l *LastConnError) Err() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.err
}

// AwaitConnected blocks until nc (made with Wait) is connected, ctx ends or
// timeout passes. While it waits, notify is called about every two seconds
// with the time waited and the last connection error from last (which may
// be nil), so a caller can say at once that the server is not there. It
// returns an error wrapping ErrUnreachable that names url and that error.
func AwaitConnected(ctx context.Context, nc *nats.Conn, url string, timeout time.Duration, last *LastConnError, notify func(waited time.Duration, lastErr error)) error {
	start := time.Now()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	lastNotify := start
	for !nc.IsConnected() {
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w: %s: %w", ErrUnreachable, url, ctx.Err())
		case <-tick.C:
		}
		waited := time.Since(start)
		if waited >= timeout {
			return fmt.Errorf("%w: %s after %s: %v", ErrUnreachable, url, timeout, last.Err())
		}
		if notify != nil && time.Since(lastNotify) >= 2*time.Second {
			lastNotify = time.Now()
			notify(waited.Round(time.Second), last.Err())
		}
	}
	return nil
}
