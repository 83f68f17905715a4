package mcptools

import (
	"context"
	"net/http"
	"os/exec"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/salvagehq/salvage"
)

// A Transport makes the transport of one session to a server. A Server
// calls it again for every new session, so it must return a fresh
// transport each time (a new process, a new connection).
type Transport func() mcp.Transport

// Command reaches a server run as a child process that speaks MCP on its
// standard input and output: each session starts the command anew, and
// closing the session stops it. Build the Transport by hand for another
// environment, directory or stderr:
//
//	func() mcp.Transport { cmd := exec.Command(...); cmd.Stderr = os.Stderr; return &mcp.CommandTransport{Command: cmd} }
func Command(name string, args ...string) Transport {
	return func() mcp.Transport {
		return &mcp.CommandTransport{Command: exec.Command(name, args...), TerminateDuration: 2 * time.Second}
	}
}

// StreamableHTTP reaches a server at endpoint by MCP's streamable HTTP
// transport, through client (nil: http.DefaultClient's transport, no
// timeout of its own: each call's context bounds it). A 429 answer's
// Retry-After reaches the call's error (salvage.RateLimited): the SDK
// itself only reports "Too Many Requests".
func StreamableHTTP(endpoint string, client *http.Client) Transport {
	c := &http.Client{}
	if client != nil {
		*c = *client
	}
	base := c.Transport
	if base == nil {
		base = http.DefaultTransport
	}
	c.Transport = retryAfterTransport{base}
	return func() mcp.Transport {
		// No standalone SSE stream: Salvage only reads the answers to
		// its calls, and one idle stream per session is one connection
		// less to keep.
		return &mcp.StreamableClientTransport{Endpoint: endpoint, HTTPClient: c, DisableStandaloneSSE: true}
	}
}

// retryAfterTransport notes a 429's Retry-After in the waitNote its
// request's context carries: the SDK's error for a 429 drops the header.
type retryAfterTransport struct{ base http.RoundTripper }

// RoundTrip makes the request and notes a 429's wait.
func (t retryAfterTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := t.base.RoundTrip(req)
	if err == nil && resp.StatusCode == http.StatusTooManyRequests {
		if n, ok := req.Context().Value(waitKey{}).(*waitNote); ok {
			after, _ := salvage.RetryAfter(resp.Header, time.Now())
			n.set(after)
		}
	}
	return resp, err
}

type waitKey struct{}

// waitNote is where a call learns that its server answered 429, and the
// wait it asked for.
type waitNote struct {
	mu      sync.Mutex
	limited bool
	after   time.Duration
}

func (n *waitNote) set(after time.Duration) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.limited, n.after = true, after
}

func (n *waitNote) get() (time.Duration, bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.after, n.limited
}

// withWaitNote is ctx carrying a new waitNote.
func withWaitNote(ctx context.Context) (context.Context, *waitNote) {
	n := &waitNote{}
	return context.WithValue(ctx, waitKey{}, n), n
}
