package spec

import (
	"fmt"
	"maps"
	"net/http"
	"regexp"
	"slices"
	"strings"
)

// Bounds of an MCP server's headers.
const (
	headersMax     = 32
	headerValueMax = 8 << 10
)

// envName is the name of an environment variable a header value may use.
var envName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// headerName is an HTTP field name (RFC 9110 token).
var headerName = regexp.MustCompile("^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")

// transportHeaders are the MCP transport's own: a file may not set them.
var transportHeaders = []string{"Accept", "Content-Type", "Content-Length", "Host", "Mcp-Session-Id", "Mcp-Protocol-Version", "Last-Event-Id"}

// checkHeaders checks a server's headers without their values' secrets:
// no error quotes a value.
func checkHeaders(m MCPServer) error {
	if len(m.Headers) == 0 {
		return nil
	}
	if m.URL == "" {
		return fmt.Errorf("MCP server %s: headers are for a url server (a command runs with salvage's environment)", m.Name)
	}
	if len(m.Headers) > headersMax {
		return fmt.Errorf("MCP server %s: %d headers, at most %d", m.Name, len(m.Headers), headersMax)
	}
	for _, name := range slices.Sorted(maps.Keys(m.Headers)) {
		v := m.Headers[name]
		switch {
		case !headerName.MatchString(name):
			return fmt.Errorf("MCP server %s: %q is not a header name", m.Name, name)
		case slices.Contains(transportHeaders, http.CanonicalHeaderKey(name)):
			return fmt.Errorf("MCP server %s: header %s is the MCP transport's own", m.Name, name)
		case len(v) > headerValueMax:
			return fmt.Errorf("MCP server %s: header %s is %d bytes, at most %d", m.Name, name, len(v), headerValueMax)
		case strings.ContainsAny(v, "\r\n\x00"):
			return fmt.Errorf("MCP server %s: header %s has a line break or NUL in its value", m.Name, name)
		}
		if _, err := expand(v, func(string) (string, bool) { return "", true }); err != nil {
			return fmt.Errorf("MCP server %s: header %s: %w", m.Name, name, err)
		}
	}
	return nil
}

// expand replaces each ${NAME} in v by lookup(NAME); $ alone is itself.
// Its errors name the variable, never a value.
func expand(v string, lookup func(string) (string, bool)) (string, error) {
	var b strings.Builder
	for {
		i := strings.Index(v, "${")
		if i < 0 {
			b.WriteString(v)
			return b.String(), nil
		}
		b.WriteString(v[:i])
		j := strings.IndexByte(v[i:], '}')
		if j < 0 {
			return "", fmt.Errorf("a ${ without its }")
		}
		name := v[i+2 : i+j]
		if !envName.MatchString(name) {
			return "", fmt.Errorf("${%s} is not an environment variable's name", name)
		}
		val, ok := lookup(name)
		if !ok {
			return "", fmt.Errorf("environment variable %s is not set", name)
		}
		b.WriteString(val)
		v = v[i+j+1:]
	}
}

// serverHeaders is m's headers with the environment's values in them.
func serverHeaders(m MCPServer, lookup func(string) (string, bool)) (http.Header, error) {
	h := http.Header{}
	for name, v := range m.Headers {
		val, err := expand(v, lookup)
		if err != nil {
			return nil, fmt.Errorf("header %s: %w", name, err)
		}
		if strings.ContainsAny(val, "\r\n\x00") || len(val) > headerValueMax {
			return nil, fmt.Errorf("header %s: its value, from the environment, has a line break or NUL, or is over %d bytes", name, headerValueMax)
		}
		h.Set(name, val)
	}
	return h, nil
}

// headerTransport sends its headers with every request.
type headerTransport struct {
	base http.RoundTripper
	h    http.Header
}

// RoundTrip sends req with the headers, on a copy (a RoundTripper does
// not change its request).
func (t headerTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	req = req.Clone(req.Context())
	for k, v := range t.h {
		req.Header[k] = v
	}
	return t.base.RoundTrip(req)
}
