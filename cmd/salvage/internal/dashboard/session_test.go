package dashboard_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/salvagehq/salvage/cmd/salvage/internal/dashboard"
	"github.com/salvagehq/salvage/salvagetest"
	"github.com/salvagehq/salvage/salvagetype"
)

// send is one request with a body, headers and cookies; it returns the
// response (its body read) and the body.
func send(t *testing.T, method, url, body string, headers map[string]string, cookies ...*http.Cookie) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range headers {
		req.Header.Set(k, v)
	}
	for _, c := range cookies {
		req.AddCookie(c)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	return resp, string(data)
}

func randomToken(t *testing.T) string {
	t.Helper()
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	return "tok-" + hex.EncodeToString(b)
}

// sessionCookie is the session cookie a response sets, or nil.
func sessionCookie(resp *http.Response) *http.Cookie {
	for _, c := range resp.Cookies() {
		if c.Name == dashboard.SessionCookie {
			return c
		}
	}
	return nil
}

// TestConfiguredTokenIsNeverServed: with a configured token, no byte the
// dashboard serves — the page, every read view, metrics, the answers to
// a refused and an accepted sign-in and mutation — contains it.
func TestConfiguredTokenIsNeverServed(t *testing.T) {
	t.Parallel()
	token := randomToken(t)
	f := setupWith(t, dashboard.Config{Token: token})
	origin := map[string]string{"Origin": f.url}
	check := func(what string, resp *http.Response, body string) {
		t.Helper()
		if strings.Contains(body, token) {
			t.Errorf("%s: the body carries the token", what)
		}
		for k, vs := range resp.Header {
			for _, v := range vs {
				if strings.Contains(v, token) {
					t.Errorf("%s: header %s carries the token", what, k)
				}
			}
		}
	}
	resp, page := send(t, http.MethodGet, f.url+"/", "", nil)
	if resp.StatusCode != 200 || !strings.Contains(page, `name="salvage-token" content=""`) || !strings.Contains(page, `id="signin"`) {
		t.Fatalf("page %d: want an empty token and the sign-in form", resp.StatusCode)
	}
	if cc := resp.Header.Get("Cache-Control"); cc != "no-store" {
		t.Errorf("page Cache-Control %q, want no-store", cc)
	}
	check("page", resp, page)
	paths := []string{"/healthz", "/metrics", "/api/session", "/api/summary", "/api/history", "/api/jobs", "/api/jobs/01JDASHBOARD00000000000000",
		"/api/envelopes", "/api/envelopes/" + f.envID, "/api/pipelines", "/api/workers", "/api/approvals", "/api/jobs/01JDASHBOARD00000000000000/chunks/3/trace", "/nope"}
	// views of jobs, envelopes and the journal are for those signed in.
	views := func(path string) bool { return strings.HasPrefix(path, "/api/") && path != "/api/session" }
	for _, path := range paths {
		resp, body := send(t, http.MethodGet, f.url+path, "", nil)
		check(path, resp, body)
		if views(path) && (resp.StatusCode != http.StatusUnauthorized || strings.Contains(body, "01JDASHBOARD") || strings.Contains(body, f.envID)) {
			t.Errorf("%s without a sign-in: %d %.120s, want 401 and nothing of the job", path, resp.StatusCode, body)
		}
	}
	resp, body := send(t, http.MethodPost, f.url+"/api/session", `{"token":"guess"}`, origin)
	check("refused sign-in", resp, body)
	resp, body = send(t, http.MethodPost, f.url+"/api/envelopes/"+f.envID+"/ack", "{}", origin)
	check("refused mutation", resp, body)
	resp, body = send(t, http.MethodPost, f.url+"/api/session", `{"token":"`+token+`"}`, origin)
	check("sign-in", resp, body)
	c := sessionCookie(resp)
	if c == nil || c.Value == "" || strings.Contains(c.Value, token) {
		t.Fatalf("sign-in cookie %+v", c)
	}
	resp, body = send(t, http.MethodPost, f.url+"/api/envelopes/"+f.envID+"/ack", "{}", origin, c)
	check("mutation", resp, body)
	if resp.StatusCode != 200 {
		t.Fatalf("ack with the session: %d %s", resp.StatusCode, body)
	}
	resp, page = send(t, http.MethodGet, f.url+"/", "", nil, c)
	check("page, signed in", resp, page)
	for _, path := range paths {
		resp, body := send(t, http.MethodGet, f.url+path, "", nil, c)
		check(path+", signed in", resp, body)
		if views(path) && resp.StatusCode != http.StatusOK {
			t.Errorf("%s signed in: %d %.120s", path, resp.StatusCode, body)
		}
	}
	if resp, body := send(t, http.MethodGet, f.url+"/api/summary", "", map[string]string{dashboard.TokenHeader: token}); resp.StatusCode != http.StatusOK {
		t.Errorf("a script's read with the token: %d %.120s", resp.StatusCode, body)
	}
}

// TestSignInSignOutAndExpiry: the token signs a browser in once (an
// HttpOnly, SameSite=Strict cookie naming a random session); the cookie
// authorizes mutations from this origin only, until sign-out or expiry.
func TestSignInSignOutAndExpiry(t *testing.T) {
	t.Parallel()
	token := randomToken(t)
	f := setupWith(t, dashboard.Config{Token: token, SessionTTL: time.Second})
	origin := map[string]string{"Origin": f.url}
	ack := f.url + "/api/envelopes/" + f.envID + "/ack"
	unacked := func(what string) {
		t.Helper()
		if rec, _, err := f.stores.Envelopes.Get(context.Background(), f.envID); err != nil || rec.AckedBy != "" {
			t.Fatalf("%s acknowledged the envelope: %+v %v", what, rec, err)
		}
	}
	state := func(c ...*http.Cookie) map[string]any {
		t.Helper()
		_, body := send(t, http.MethodGet, f.url+"/api/session", "", nil, c...)
		var st map[string]any
		if err := json.Unmarshal([]byte(body), &st); err != nil {
			t.Fatalf("/api/session: %s", body)
		}
		return st
	}
	if st := state(); st["mode"] != "token" || st["signed_in"] != false {
		t.Fatalf("session before sign-in: %v", st)
	}
	for name, tc := range map[string]struct {
		body    string
		headers map[string]string
		want    int
	}{
		"wrong token":     {`{"token":"guess"}`, origin, http.StatusForbidden},
		"no token":        {`{}`, origin, http.StatusForbidden},
		"cross-origin":    {`{"token":"` + token + `"}`, map[string]string{"Origin": "http://evil.example"}, http.StatusForbidden},
		"malformed":       {`{"token":`, origin, http.StatusBadRequest},
		"unknown field":   {`{"token":"` + token + `","admin":true}`, origin, http.StatusBadRequest},
		"oversized":       {`{"token":"` + strings.Repeat("x", 5000) + `"}`, origin, http.StatusBadRequest},
		"trailing object": {`{"token":"` + token + `"} {}`, origin, http.StatusBadRequest},
	} {
		resp, body := send(t, http.MethodPost, f.url+"/api/session", tc.body, tc.headers)
		if resp.StatusCode != tc.want || sessionCookie(resp) != nil {
			t.Errorf("sign-in, %s: %d %s (cookie %v); want %d and no cookie", name, resp.StatusCode, body, sessionCookie(resp), tc.want)
		}
	}
	if resp, body := send(t, http.MethodPost, ack, "{}", origin); resp.StatusCode != http.StatusForbidden || !strings.Contains(body, "sign in") {
		t.Fatalf("ack without a session: %d %s", resp.StatusCode, body)
	}
	unacked("a request without a session")

	signIn := func() *http.Cookie {
		t.Helper()
		resp, body := send(t, http.MethodPost, f.url+"/api/session", `{"token":"`+token+`"}`, origin)
		c := sessionCookie(resp)
		if resp.StatusCode != 200 || c == nil || !c.HttpOnly || c.SameSite != http.SameSiteStrictMode || c.Path != "/" {
			t.Fatalf("sign-in: %d %s, cookie %+v", resp.StatusCode, body, c)
		}
		return c
	}
	c := signIn()
	if st := state(c); st["signed_in"] != true {
		t.Fatalf("session after sign-in: %v", st)
	}
	if c.Secure {
		t.Error("a session over plain HTTP has a Secure cookie the browser would not send back")
	}
	// Behind a proxy that terminates TLS the origin is https and the
	// cookie Secure.
	proxied := map[string]string{"Origin": strings.Replace(f.url, "http://", "https://", 1), "X-Forwarded-Proto": "https"}
	if resp, body := send(t, http.MethodPost, f.url+"/api/session", `{"token":"`+token+`"}`, proxied); resp.StatusCode != 200 || sessionCookie(resp) == nil || !sessionCookie(resp).Secure {
		t.Errorf("sign-in through a TLS proxy: %d %s, cookie %+v", resp.StatusCode, body, sessionCookie(resp))
	}
	if resp, body := send(t, http.MethodPost, ack, "{}", map[string]string{"Origin": "http://evil.example"}, c); resp.StatusCode != http.StatusForbidden {
		t.Fatalf("a cross-origin ack with the cookie: %d %s", resp.StatusCode, body)
	}
	if resp, body := send(t, http.MethodPost, ack, "{}", map[string]string{"Sec-Fetch-Site": "cross-site"}, c); resp.StatusCode != http.StatusForbidden {
		t.Fatalf("a cross-site ack with the cookie: %d %s", resp.StatusCode, body)
	}
	forged := &http.Cookie{Name: dashboard.SessionCookie, Value: strings.Repeat("0", 64)}
	if resp, _ := send(t, http.MethodPost, ack, "{}", origin, forged); resp.StatusCode != http.StatusForbidden {
		t.Fatalf("a made-up session: %d", resp.StatusCode)
	}
	unacked("a refused request with a cookie")

	// Expiry: the session ends after its TTL, whatever the cookie says.
	salvagetest.Eventually(t, time.Minute, func() bool { return state(c)["signed_in"] == false }, "the session to expire")
	if resp, _ := send(t, http.MethodPost, ack, "{}", origin, c); resp.StatusCode != http.StatusForbidden {
		t.Fatalf("ack with an expired session: %d", resp.StatusCode)
	}
	unacked("an expired session")

	// Sign-out: the session ends at once, and its cookie is cleared.
	c = signIn()
	if resp, body := send(t, http.MethodPost, ack, "{}", origin, c); resp.StatusCode != 200 {
		t.Fatalf("ack with a session: %d %s", resp.StatusCode, body)
	}
	if rec, _, _ := f.stores.Envelopes.Get(context.Background(), f.envID); rec.AckedBy != "token" {
		t.Fatalf("the signed-in ack did not land: %+v", rec)
	}
	resp, _ := send(t, http.MethodDelete, f.url+"/api/session", "", origin, c)
	if cleared := sessionCookie(resp); resp.StatusCode != 200 || cleared == nil || cleared.MaxAge >= 0 {
		t.Fatalf("sign-out: %d, cookie %+v", resp.StatusCode, cleared)
	}
	if resp, _ := send(t, http.MethodPost, f.url+"/api/envelopes/"+f.envID+"/resolve", "{}", origin, c); resp.StatusCode != http.StatusForbidden {
		t.Fatalf("resolve after sign-out: %d", resp.StatusCode)
	}
	if rec, _, _ := f.stores.Envelopes.Get(context.Background(), f.envID); rec.Status != salvagetype.EnvelopeOpen {
		t.Fatalf("a request after sign-out resolved the envelope: %+v", rec)
	}
}

// TestLoopbackWithoutATokenStaysOpen: a loopback dashboard without a
// configured token works as before: its page carries a random token,
// no sign-in is asked for.
func TestLoopbackWithoutATokenStaysOpen(t *testing.T) {
	t.Parallel()
	f := setup(t, "")
	_, body := send(t, http.MethodGet, f.url+"/api/session", "", nil)
	if !strings.Contains(body, `"mode":"open"`) {
		t.Fatalf("/api/session: %s", body)
	}
	if resp, _ := send(t, http.MethodPost, f.url+"/api/session", `{"token":"anything"}`, map[string]string{"Origin": f.url}); resp.StatusCode != http.StatusForbidden {
		t.Fatalf("sign-in with no configured token: %d", resp.StatusCode)
	}
}

// TestBodiesAreCheckedBeforeActing: every mutation refuses a malformed,
// oversized or unknown-field body with 400 and changes nothing; a bulk
// action needs a filter (a minimum age of zero is none).
func TestBodiesAreCheckedBeforeActing(t *testing.T) {
	t.Parallel()
	f := setup(t, "s3cret")
	ctx := context.Background()
	if err := f.stores.Pipelines.Register(ctx, "order-fulfillment"); err != nil {
		t.Fatal(err)
	}
	auth := map[string]string{dashboard.TokenHeader: "s3cret", "Origin": f.url}
	bad := map[string]string{
		"malformed":     `{"reason":`,
		"not an object": `["deploy"]`,
		"unknown field": `{"reasn":"deploy"}`,
		"oversized":     `{"reason":"` + strings.Repeat("x", 5000) + `"}`,
		"trailing data": `{"reason":"deploy"} {"reason":"again"}`,
	}
	for name, body := range bad {
		for _, path := range []string{"/api/pipelines/order-fulfillment/pause", "/api/envelopes/" + f.envID + "/ack",
			"/api/envelopes/" + f.envID + "/replay", "/api/approvals/01JDASHBOARD00000000000000/3/approve"} {
			if resp, out := send(t, http.MethodPost, f.url+path, body, auth); resp.StatusCode != http.StatusBadRequest {
				t.Errorf("%s body to %s: %d %s; want 400", name, path, resp.StatusCode, out)
			}
		}
	}
	for name, body := range map[string]string{
		"no filter":        `{"action":"replay"}`,
		"zero minimum age": `{"action":"replay","min_age":"0s"}`,
		"unknown field":    `{"action":"replay","categry":"TRANSIENT_NETWORK"}`,
		"malformed":        `{"action":"replay",`,
	} {
		if resp, out := send(t, http.MethodPost, f.url+"/api/bulk", body, auth); resp.StatusCode != http.StatusBadRequest {
			t.Errorf("bulk, %s: %d %s; want 400", name, resp.StatusCode, out)
		}
	}
	if st, err := f.stores.Pipelines.Get(ctx, "order-fulfillment"); err != nil || st.Paused {
		t.Fatalf("a refused pause paused: %+v %v", st, err)
	}
	if rec, _, err := f.stores.Envelopes.Get(ctx, f.envID); err != nil || rec.Replays != 0 || rec.AckedBy != "" || rec.Status != salvagetype.EnvelopeOpen {
		t.Fatalf("a refused request changed the envelope: %+v %v", rec, err)
	}
	// The same bodies, well formed, act.
	if resp, out := send(t, http.MethodPost, f.url+"/api/pipelines/order-fulfillment/pause", `{"reason":"deploy"}`, auth); resp.StatusCode != 200 {
		t.Fatalf("pause: %d %s", resp.StatusCode, out)
	}
	// A minimum age counts in the envelope's status: the fixture's
	// entered "open" when it was written, just now.
	salvagetest.Eventually(t, time.Minute, func() bool {
		resp, out := send(t, http.MethodPost, f.url+"/api/bulk", `{"action":"ack","min_age":"1s","dry_run":true}`, auth)
		return resp.StatusCode == 200 && strings.Contains(out, `"matched":1`)
	}, "bulk with a minimum age matches the envelope once it is a second in its status")
}

// TestSignInCannotBeBruteForced is the sign-in of issue 33: of 200
// parallel wrong sign-ins (it answered all 200 in half a second, about 190
// guesses a second), at least 95% are refused without their token being
// compared (429); wrong tokens in a row lock the address out, and during
// the lockout even the right token is refused; once it ends, the right
// token signs in. A token in X-Salvage-Token is guarded the same way.
func TestSignInCannotBeBruteForced(t *testing.T) {
	t.Parallel()
	token := randomToken(t)
	f := setupWith(t, dashboard.Config{Token: token})
	origin := map[string]string{"Origin": f.url}
	codes := make(chan int, 200)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range 200 {
		wg.Go(func() {
			<-start
			resp, _ := send(t, http.MethodPost, f.url+"/api/session", fmt.Sprintf(`{"token":"guess-%d"}`, i), origin)
			codes <- resp.StatusCode
		})
	}
	close(start)
	wg.Wait()
	close(codes)
	count := map[int]int{}
	for c := range codes {
		count[c]++
	}
	if count[http.StatusTooManyRequests] < 190 || count[http.StatusForbidden]+count[http.StatusTooManyRequests] != 200 {
		t.Fatalf("200 parallel wrong sign-ins answered %v; want at least 190 refused unchecked (429), the rest 403", count)
	}
	// Wrong tokens one after another: a lockout.
	locked := false
	for range 20 {
		resp, _ := send(t, http.MethodPost, f.url+"/api/session", `{"token":"wrong"}`, origin)
		if resp.StatusCode == http.StatusTooManyRequests && resp.Header.Get("Retry-After") != "" {
			locked = true
			break
		}
	}
	if !locked {
		t.Fatal("20 wrong sign-ins in a row locked nothing out")
	}
	if resp, _ := send(t, http.MethodPost, f.url+"/api/session", `{"token":"`+token+`"}`, origin); resp.StatusCode != http.StatusTooManyRequests {
		t.Fatalf("the right token during the lockout: %d", resp.StatusCode)
	}
	if resp, _ := send(t, http.MethodGet, f.url+"/api/jobs", "", map[string]string{dashboard.TokenHeader: "wrong"}); resp.StatusCode != http.StatusTooManyRequests {
		t.Fatalf("a header token during the lockout: %d", resp.StatusCode)
	}
	var signedIn bool
	salvagetest.Eventually(t, 2*time.Minute, func() bool {
		resp, _ := send(t, http.MethodPost, f.url+"/api/session", `{"token":"`+token+`"}`, origin)
		signedIn = resp.StatusCode == http.StatusOK && sessionCookie(resp) != nil
		return signedIn || resp.StatusCode != http.StatusTooManyRequests
	}, "the lockout to end")
	if !signedIn {
		t.Fatal("the right token was refused once the lockout ended")
	}
}
