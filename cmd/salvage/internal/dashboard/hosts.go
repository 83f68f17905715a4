package dashboard

import (
	"net"
	"net/http"
	"strings"
)

// hostGuard serves only requests whose Host names this dashboard: the
// listen address, localhost, 127.0.0.1, ::1 and the configured extra
// names. It is the defence against DNS rebinding, where a page on
// evil.example re-resolves its name to 127.0.0.1: the browser then sends
// Host: evil.example, which is refused with 421 before anything is read.
type hostGuard struct {
	allowed map[string]bool
	next    http.Handler
}

func newHostGuard(addr string, extra []string, next http.Handler) *hostGuard {
	g := &hostGuard{allowed: map[string]bool{"localhost": true, "127.0.0.1": true, "::1": true}, next: next}
	if host, _, err := net.SplitHostPort(addr); err == nil {
		if ip := net.ParseIP(host); host != "" && (ip == nil || !ip.IsUnspecified()) {
			g.allowed[strings.ToLower(host)] = true
		}
	}
	for _, h := range extra {
		if h = strings.ToLower(strings.TrimSpace(h)); h != "" {
			g.allowed[strings.Trim(h, "[]")] = true
		}
	}
	return g
}

// hostname is the host part of a Host header, lower-cased, without port
// or IPv6 brackets.
func hostname(hostport string) string {
	host := hostport
	if h, _, err := net.SplitHostPort(hostport); err == nil {
		host = h
	}
	return strings.ToLower(strings.Trim(host, "[]"))
}

func (g *hostGuard) ok(hostport string) bool { return g.allowed[hostname(hostport)] }

func (g *hostGuard) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if !g.ok(r.Host) {
		http.Error(w, "host not allowed: add it with --http-allowed-hosts", http.StatusMisdirectedRequest)
		return
	}
	g.next.ServeHTTP(w, r)
}
