package sim_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/salvagehq/salvage/cmd/salvage/internal/sim"
	"github.com/salvagehq/salvage/cmd/salvage/internal/simmodel"
	"github.com/salvagehq/salvage/recovery"
	"github.com/salvagehq/salvage/salvagetype"
)

// start serves a sim with cfg; its client waits for an answer as long as
// a test could want (the few calls meant to time out use a copy with a
// short Timeout).
func start(t *testing.T, cfg sim.Config) *sim.Client {
	t.Helper()
	m, _ := simmodel.New(simmodel.Config{})
	srv := httptest.NewServer(sim.Handler(sim.NewState(cfg), m))
	t.Cleanup(srv.Close)
	return &sim.Client{BaseURL: srv.URL, Timeout: time.Minute}
}

func TestIdempotencyKeyRepeatsTheFirstResult(t *testing.T) {
	c := start(t, sim.Config{})
	ctx := context.Background()
	a, err := c.Effect(ctx, "payments", "charge", "k1", map[string]any{"order": "o1", "amount": 10})
	if err != nil {
		t.Fatal(err)
	}
	b, err := c.Effect(ctx, "payments", "charge", "k1", map[string]any{"order": "o1", "amount": 10})
	if err != nil || b.ResourceID != a.ResourceID || !b.Replayed {
		t.Fatalf("repeat = %+v, %v; first %+v", b, err, a)
	}
	l, _ := c.Ledger(ctx)
	if l.Summary.Effects != 1 || l.Effects[0].Requests != 2 || l.Effects[0].Applied != 1 || l.Summary.DuplicateKeys != 0 {
		t.Fatalf("ledger = %+v", l)
	}
	// Another key for the same order is a second charge: the ledger says so.
	if _, err := c.Effect(ctx, "payments", "charge", "k2", map[string]any{"order": "o1"}); err != nil {
		t.Fatal(err)
	}
	if l, _ := c.Ledger(ctx); l.Summary.DuplicateOrders != 1 {
		t.Fatalf("duplicate charge not counted: %+v", l.Summary)
	}
	// The summary alone counts the same, without the effects.
	if sum, err := c.LedgerSummary(ctx); err != nil || sum != (sim.Summary{Effects: 2, Standing: 2, DuplicateOrders: 1}) {
		t.Fatalf("ledger summary = %+v, %v", sum, err)
	}
}

func TestVerifyAndCompensate(t *testing.T) {
	c := start(t, sim.Config{})
	ctx := context.Background()
	if v, err := c.Verify(ctx, "erp", "nothing"); err != nil || v.Applied {
		t.Fatalf("verify of an unknown key = %+v, %v", v, err)
	}
	e, _ := c.Effect(ctx, "erp", "invoice", "inv-key", map[string]any{"order": "o1"})
	if v, _ := c.Verify(ctx, "erp", "inv-key"); !v.Applied || v.ResourceID != e.ResourceID {
		t.Fatalf("verify = %+v", v)
	}
	for range 2 { // compensation is idempotent too
		if _, err := c.Compensate(ctx, "erp", "void", "void-key", "inv-key"); err != nil {
			t.Fatal(err)
		}
	}
	l, _ := c.Ledger(ctx)
	if l.Summary.Standing != 0 || l.Summary.Compensated != 1 {
		t.Fatalf("ledger after void = %+v", l.Summary)
	}
	if _, err := c.Effect(ctx, "email", "unsend", "k", nil); recovery.ClassOf(err) != salvagetype.ClassPermanent {
		t.Fatalf("undo of an irreversible effect: %v", err)
	}
}

func TestInjectedFaults(t *testing.T) {
	// A timeout rule holds its request for Hang (or until the caller
	// gives up); the calls it catches go through hung, which gives up
	// after 2 s, far past any answer but far short of Hang.
	c := start(t, sim.Config{Hang: time.Minute, Rules: []sim.Rule{
		{System: "payments", Order: "after", Mode: "timeout-after", Times: 1},
		{System: "payments", Order: "before", Mode: "timeout-before", Times: 1},
		{System: "email", Order: "bad", Mode: "permanent"},
		{System: "payments", Order: "stuck", Mode: "compensation-fails"},
	}, Systems: map[string]sim.Faults{"crm": {OutageUntil: time.Now().Add(time.Hour)}}})
	ctx := context.Background()
	hung := *c
	hung.Timeout = 2 * time.Second

	_, err := hung.Effect(ctx, "payments", "charge", "ka", map[string]any{"order": "after"})
	if !errors.Is(err, salvagetype.ErrTimeout) {
		t.Fatalf("timeout after commit: %v", err)
	}
	if v, _ := c.Verify(ctx, "payments", "ka"); !v.Applied {
		t.Fatal("a timeout after commit must leave the effect applied")
	}
	_, err = hung.Effect(ctx, "payments", "charge", "kb", map[string]any{"order": "before"})
	if !errors.Is(err, salvagetype.ErrTimeout) {
		t.Fatalf("timeout before commit: %v", err)
	}
	if v, _ := c.Verify(ctx, "payments", "kb"); v.Applied {
		t.Fatal("a timeout before commit must not apply the effect")
	}
	if _, err := c.Effect(ctx, "payments", "charge", "kb", map[string]any{"order": "before"}); err != nil {
		t.Fatalf("retry after a timeout before commit: %v", err)
	}
	if _, err := c.Effect(ctx, "email", "send", "ke", map[string]any{"order": "bad"}); !errors.Is(err, salvagetype.ErrPermanent) {
		t.Fatalf("permanent rule: %v", err)
	}
	if _, err := c.Effect(ctx, "crm", "update", "kc", map[string]any{"order": "x"}); !errors.Is(err, salvagetype.ErrTransient) {
		t.Fatalf("outage: %v", err)
	}
	if _, err := c.Effect(ctx, "payments", "charge", "ks", map[string]any{"order": "stuck"}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Compensate(ctx, "payments", "refund", "rk", "ks"); !errors.Is(err, salvagetype.ErrPermanent) {
		t.Fatalf("failing refund: %v", err)
	}
	l, _ := c.Ledger(ctx)
	if l.Summary.Effects != 3 || l.Summary.Standing != 3 {
		t.Fatalf("ledger = %+v", l.Summary)
	}
}

// TestStopRules: stopping one order's rules ends its fault at once and
// leaves another rule's count where it was; stopping a rule that does not
// exist is refused.
func TestStopRules(t *testing.T) {
	c := start(t, sim.Config{Rules: []sim.Rule{
		{System: "crm", Order: "a", Mode: "error"},
		{System: "crm", Order: "b", Mode: "error", Times: 2},
	}})
	ctx := context.Background()
	update := func(key, order string) error {
		_, err := c.Effect(ctx, "crm", "update", key, map[string]any{"order": order})
		return err
	}
	if err := update("a1", "a"); !errors.Is(err, salvagetype.ErrTransient) {
		t.Fatalf("order a before the stop: %v", err)
	}
	if err := update("b1", "b"); !errors.Is(err, salvagetype.ErrTransient) {
		t.Fatalf("order b, first of two: %v", err)
	}
	if err := c.StopRules(ctx, "crm", "a"); err != nil {
		t.Fatal(err)
	}
	if err := update("a2", "a"); err != nil {
		t.Fatalf("order a after the stop: %v", err)
	}
	if err := update("b2", "b"); !errors.Is(err, salvagetype.ErrTransient) {
		t.Fatalf("order b, second of two, after a's stop: %v (its count was reset)", err)
	}
	if err := update("b3", "b"); err != nil {
		t.Fatalf("order b past its two: %v", err)
	}
	if err := c.StopRules(ctx, "crm", "nope"); !errors.Is(err, salvagetype.ErrPermanent) || recovery.StatusOf(err) != 404 {
		t.Fatalf("stop a rule that does not exist: %v, want a permanent 404", err)
	}
}

func TestRateLimitCarriesRetryAfter(t *testing.T) {
	c := start(t, sim.Config{Systems: map[string]sim.Faults{"wms": {RateLimitRate: 1}}})
	_, err := c.Effect(context.Background(), "wms", "reserve", "k", map[string]any{"order": "o"})
	var ce *salvagetype.CallError
	if !errors.As(err, &ce) || ce.Class != salvagetype.ClassRateLimited || ce.RetryAfter <= 0 || ce.RetryAfter > time.Second {
		t.Fatalf("err = %v", err)
	}
}

// TestAnAnswerPastTheBoundIsRefusedWhole: a ledger larger than MaxAnswer
// is an error that says so, not JSON cut at the bound ("unexpected end of
// JSON input", as a cluster test that ran 1,500 effects once saw).
func TestAnAnswerPastTheBoundIsRefusedWhole(t *testing.T) {
	big := `{"effects":[` + strings.Repeat(`{"system":"payments"},`, sim.MaxAnswer/len(`{"system":"payments"},`)) + `{"system":"payments"}]}`
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, big)
	}))
	t.Cleanup(srv.Close)
	c := &sim.Client{BaseURL: srv.URL, Timeout: time.Minute}
	_, err := c.Ledger(t.Context())
	if !errors.Is(err, sim.ErrAnswerTooLarge) {
		t.Fatalf("a %d-byte ledger: %v; want ErrAnswerTooLarge", len(big), err)
	}
}
