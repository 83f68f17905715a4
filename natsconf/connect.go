package natsconf

import (
	"fmt"
	"os"
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
	// Wait keeps retrying the first connection until the server is there,
	// instead of failing at once. Long-running roles set it.
	Wait bool
}

// ContextName is the nats CLI context in force: Context, else
// $NATS_CONTEXT, else none.
func (c ConnectConfig) ContextName() string {
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
		nats.ErrorHandler(func(*nats.Conn, *nats.Subscription, error) {}),
	)
	if c.Wait {
		opts = append(opts, nats.RetryOnFailedConnect(true))
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
	if err != nil {
		return nil, fmt.Errorf("natsconf: connect %s: %w", url, err)
	}
	return nc, nil
}
