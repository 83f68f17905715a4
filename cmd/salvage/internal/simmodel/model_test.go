package simmodel_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/salvagehq/salvage/cmd/salvage/internal/simmodel"
	"github.com/salvagehq/salvage/salvagetype"
)

func outcomes(t *testing.T, cfg simmodel.Config) []string {
	t.Helper()
	m, err := simmodel.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for i := range 2000 {
		r, err := m.Complete(context.Background(), simmodel.Request{Key: fmt.Sprint(i % 500), Prompt: fmt.Sprint("p", i)})
		var ce *salvagetype.CallError
		switch {
		case errors.As(err, &ce):
			out = append(out, ce.Class.String())
		case err != nil:
			t.Fatal(err)
		default:
			out = append(out, fmt.Sprint(r.Score))
		}
	}
	return out
}

func TestDeterministicForSeed(t *testing.T) {
	cfg := simmodel.Config{Seed: 42, FailureRate: 0.2, PermanentRate: 0.05, TimeoutAfter: time.Microsecond}
	a, b := outcomes(t, cfg), outcomes(t, cfg)
	for i := range a {
		if a[i] != b[i] {
			t.Fatalf("call %d: %s then %s with the same seed", i, a[i], b[i])
		}
	}
	cfg.Seed = 43
	c := outcomes(t, cfg)
	same := 0
	for i := range a {
		if a[i] == c[i] {
			same++
		}
	}
	if same == len(a) {
		t.Fatal("another seed gave the same run")
	}
}

func TestFailureMix(t *testing.T) {
	got := map[string]int{}
	for _, o := range outcomes(t, simmodel.Config{Seed: 1, FailureRate: 0.2, PermanentRate: 0.05, TimeoutAfter: time.Microsecond}) {
		switch o {
		case "transient", "rate-limited", "timeout", "permanent":
			got[o]++
		default:
			got["ok"]++
		}
	}
	// 2000 calls: expect ~400 transient-class failures and ~100 permanent.
	if f := got["transient"] + got["rate-limited"] + got["timeout"]; f < 300 || f > 500 {
		t.Errorf("transient-class failures = %d of 2000, want about 400 (%v)", f, got)
	}
	if got["permanent"] < 50 || got["permanent"] > 160 {
		t.Errorf("permanent failures = %d, want about 100", got["permanent"])
	}
	for _, k := range []string{"transient", "rate-limited", "timeout"} {
		if got[k] == 0 {
			t.Errorf("no %s failures injected", k)
		}
	}
}

func TestZeroConfigNeverFails(t *testing.T) {
	for i, o := range outcomes(t, simmodel.Config{}) {
		if o == "transient" || o == "rate-limited" || o == "timeout" || o == "permanent" {
			t.Fatalf("call %d failed (%s) with no failure rate", i, o)
		}
	}
}

func TestRejectsBadConfig(t *testing.T) {
	for _, cfg := range []simmodel.Config{{FailureRate: 2}, {PermanentRate: -1}, {FailureRate: 0.6, PermanentRate: 0.6}, {Latency: -time.Second}} {
		if _, err := simmodel.New(cfg); err == nil {
			t.Errorf("New(%+v) accepted", cfg)
		}
	}
}
