package dashboard_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/salvagehq/salvage"
	"github.com/salvagehq/salvage/cmd/salvage/internal/dashboard"
)

// usersFile writes a users file of lines and loads it.
func usersFile(t *testing.T, lines ...string) []dashboard.User {
	t.Helper()
	path := filepath.Join(t.TempDir(), "users.txt")
	if err := os.WriteFile(path, []byte(strings.Join(lines, "\n")+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	users, err := dashboard.LoadUsers(path)
	if err != nil {
		t.Fatal(err)
	}
	return users
}

func hash(t *testing.T, password string) string {
	t.Helper()
	h, err := dashboard.HashPassword(password)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// auditOf is the audit of envelope id, as the dashboard serves it.
func auditOf(t *testing.T, f *fixture, id string, cookies ...*http.Cookie) []salvage.AuditEntry {
	t.Helper()
	resp, body := send(t, "GET", f.url+"/api/audit?envelope="+id, "", nil, cookies...)
	var p salvage.AuditPage
	if resp.StatusCode != http.StatusOK || json.Unmarshal([]byte(body), &p) != nil {
		t.Fatalf("audit of %s: %d %s", id, resp.StatusCode, body)
	}
	return p.Items
}

// TestUsersSignInWithTheirRoles: each user of the users file signs in
// with their own password; a viewer reads every view and is refused
// every change (403, nothing recorded); an operator's change is recorded
// in the audit under their name, verified, with the reason given.
func TestUsersSignInWithTheirRoles(t *testing.T) {
	t.Parallel()
	users := usersFile(t, "# on call", "", "alice operator "+hash(t, "alice-pw"), "vic viewer "+hash(t, "vic-pw"))
	f := setupWith(t, dashboard.Config{Users: users})
	origin := map[string]string{"Origin": f.url, "Content-Type": "application/json"}
	signIn := func(user, password string) (*http.Response, string) {
		return send(t, "POST", f.url+"/api/session", `{"user": "`+user+`", "password": "`+password+`"}`, origin)
	}
	if resp, body := send(t, "GET", f.url+"/api/session", "", nil); !strings.Contains(body, `"mode":"users"`) || strings.Contains(body, `"signed_in":true`) {
		t.Fatalf("session before a sign-in: %d %s", resp.StatusCode, body)
	}
	if resp, _ := send(t, "GET", f.url+"/api/jobs", "", nil); resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("jobs without a sign-in: %d", resp.StatusCode)
	}
	for _, bad := range [][2]string{{"vic", "alice-pw"}, {"mallory", "vic-pw"}, {"vic", ""}} {
		if resp, body := signIn(bad[0], bad[1]); resp.StatusCode != http.StatusForbidden || sessionCookie(resp) != nil {
			t.Errorf("sign-in %v: %d %s", bad, resp.StatusCode, body)
		}
	}
	resp, body := signIn("vic", "vic-pw")
	vic := sessionCookie(resp)
	if resp.StatusCode != http.StatusOK || vic == nil || !strings.Contains(body, `"user":"vic"`) || !strings.Contains(body, `"role":"viewer"`) {
		t.Fatalf("vic's sign-in: %d %s", resp.StatusCode, body)
	}
	for _, view := range []string{"/api/jobs", "/api/envelopes", "/api/envelopes/" + f.envID, "/api/summary", "/api/audit"} {
		if resp, body := send(t, "GET", f.url+view, "", nil, vic); resp.StatusCode != http.StatusOK {
			t.Errorf("vic's %s: %d %s", view, resp.StatusCode, body)
		}
	}
	for _, change := range []string{"/api/envelopes/" + f.envID + "/ack", "/api/envelopes/" + f.envID + "/replay", "/api/jobs/01JDASHBOARD00000000000000/cancel",
		"/api/pipelines/order-fulfillment/pause", "/api/bulk", "/api/approvals/01JDASHBOARD00000000000000/1/approve"} {
		if resp, body := send(t, "POST", f.url+change, `{}`, origin, vic); resp.StatusCode != http.StatusForbidden || !strings.Contains(body, "viewer") {
			t.Errorf("vic's POST %s: %d %s", change, resp.StatusCode, body)
		}
	}
	if got := auditOf(t, f, f.envID, vic); len(got) != 0 {
		t.Fatalf("the viewer's refused changes are on record: %+v", got)
	}

	resp, _ = signIn("alice", "alice-pw")
	alice := sessionCookie(resp)
	if resp, body := send(t, "POST", f.url+"/api/envelopes/"+f.envID+"/ack", `{"reason": "seen, paging the team"}`, origin, alice); resp.StatusCode != http.StatusOK || !strings.Contains(body, `"acked_by":"alice"`) {
		t.Fatalf("alice's ack: %d %s", resp.StatusCode, body)
	}
	got := auditOf(t, f, f.envID, alice)
	want := salvage.Actor{Name: "alice", Via: salvage.ViaDashboard, Role: "operator", Verified: true}
	if len(got) != 1 || got[0].Actor != want || got[0].Action != salvage.AuditAck || got[0].Reason != "seen, paging the team" || got[0].Outcome != salvage.AuditOK {
		t.Fatalf("the audit of alice's ack: %+v", got)
	}
}

// TestTrustedProxyNamesThePerson: behind a proxy the operator names, the
// proxy's header says who acts — its role from the users file, else the
// proxy role — and the same header from any other address is refused.
func TestTrustedProxyNamesThePerson(t *testing.T) {
	t.Parallel()
	proxy := netip.MustParsePrefix("127.0.0.2/32")
	f := setupWith(t, dashboard.Config{ProxyHeader: "X-Forwarded-User", ProxyFrom: []netip.Prefix{proxy}, Users: usersFile(t, "pat operator")})
	fromProxy := &http.Client{Transport: &http.Transport{DialContext: (&net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP("127.0.0.2")}}).DialContext}}
	do := func(c *http.Client, method, path, body, user string) (int, string) {
		t.Helper()
		req, _ := http.NewRequestWithContext(context.Background(), method, f.url+path, strings.NewReader(body))
		req.Header.Set("Origin", f.url)
		req.Header.Set("X-Forwarded-User", user)
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		data, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(data)
	}
	if code, body := do(http.DefaultClient, "GET", "/api/jobs", "", "pat"); code != http.StatusForbidden {
		t.Fatalf("the proxy's header from 127.0.0.1: %d %s", code, body)
	}
	if code, body := do(http.DefaultClient, "POST", "/api/envelopes/"+f.envID+"/ack", "{}", "pat"); code != http.StatusForbidden {
		t.Fatalf("an ack with the proxy's header from 127.0.0.1: %d %s", code, body)
	}
	if code, body := do(fromProxy, "GET", "/api/session", "", "pat"); code != http.StatusOK || !strings.Contains(body, `"user":"pat"`) || !strings.Contains(body, `"role":"operator"`) {
		t.Fatalf("pat through the proxy: %d %s", code, body)
	}
	if code, body := do(fromProxy, "POST", "/api/envelopes/"+f.envID+"/ack", "{}", "quinn"); code != http.StatusForbidden || !strings.Contains(body, "viewer") {
		t.Fatalf("quinn, unlisted, acks: %d %s", code, body)
	}
	if code, body := do(fromProxy, "POST", "/api/envelopes/"+f.envID+"/ack", `{"reason": "on call"}`, "pat"); code != http.StatusOK {
		t.Fatalf("pat acks: %d %s", code, body)
	}
	code, body := do(fromProxy, "GET", "/api/audit?envelope="+f.envID, "", "pat")
	var p salvage.AuditPage
	if code != http.StatusOK || json.Unmarshal([]byte(body), &p) != nil || len(p.Items) != 1 || p.Items[0].Actor.Name != "pat" || !p.Items[0].Actor.Verified {
		t.Fatalf("the audit through the proxy: %d %s", code, body)
	}
}

// TestUsersFileIsChecked: a users file Salvage cannot use is refused
// with the line that is wrong.
func TestUsersFileIsChecked(t *testing.T) {
	t.Parallel()
	for _, bad := range []string{"alice", "alice admin", "alice operator not-a-hash", "alice operator x y", "alice viewer\nalice operator"} {
		path := filepath.Join(t.TempDir(), "users.txt")
		if err := os.WriteFile(path, []byte(bad+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		if _, err := dashboard.LoadUsers(path); !errors.Is(err, dashboard.ErrBadUsers) || !strings.Contains(err.Error(), "users.txt:") {
			t.Errorf("users file %q: %v", bad, err)
		}
	}
	if _, err := dashboard.Listen(nil, nil, dashboard.Config{Addr: "127.0.0.1:0", ProxyHeader: "X-Forwarded-User"}); err == nil {
		t.Error("a proxy header without the proxy's addresses was taken")
	}
}
