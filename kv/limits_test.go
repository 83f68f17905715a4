package kv_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/salvagehq/salvage/kv"
	"github.com/salvagehq/salvage/salvagetest"
	"github.com/salvagehq/salvage/salvagetype"
)

// TestStoresOpenWithoutTheLimitsBucket: a deployment provisioned before
// salvage_limits existed opens with no limits store, and asking it for
// limits says to provision; provisioning again brings the bucket.
func TestStoresOpenWithoutTheLimitsBucket(t *testing.T) {
	t.Parallel()
	srv := salvagetest.StartServer(t)
	ctx := context.Background()
	if _, err := kv.Provision(ctx, srv.JS, kv.Options{}); err != nil {
		t.Fatal(err)
	}
	if err := srv.JS.DeleteKeyValue(ctx, kv.BucketLimits); err != nil {
		t.Fatal(err)
	}
	st, err := kv.Open(ctx, srv.JS)
	if err != nil {
		t.Fatalf("open without %s: %v", kv.BucketLimits, err)
	}
	if st.Limits != nil {
		t.Fatalf("a limits store without its bucket")
	}
	if _, err := st.Limits.List(ctx); !errors.Is(err, salvagetype.ErrLimitsNotProvisioned) {
		t.Errorf("listing the limits: %v; want ErrLimitsNotProvisioned", err)
	}
	if _, err := st.Limits.Set(ctx, salvagetype.Limit{Key: "system.crm", RequestsPerMinute: 1}, "ann"); !errors.Is(err, salvagetype.ErrLimitsNotProvisioned) {
		t.Errorf("setting a limit: %v; want ErrLimitsNotProvisioned", err)
	}
	st, err = kv.Provision(ctx, srv.JS, kv.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.Limits.Set(ctx, salvagetype.Limit{Key: "system.crm", RequestsPerMinute: 1}, "ann"); err != nil {
		t.Errorf("after provisioning again: %v", err)
	}
}

// TestRefusedCountsTheLastTenMinutes: refusals are counted by minute, the
// current one and the nine before; older minutes are forgotten when the
// next is added.
func TestRefusedCountsTheLastTenMinutes(t *testing.T) {
	now := time.Date(2026, 12, 7, 10, 30, 20, 0, time.UTC)
	var sh kv.LimitShares
	sh.AddRefused(now.Add(-12*time.Minute), 4)
	sh.AddRefused(now.Add(-9*time.Minute), 2)
	sh.AddRefused(now, 1)
	sh.AddRefused(now, 0)
	if got := sh.RecentRefused(now); got != 3 {
		t.Errorf("recent refusals = %d; want the last ten minutes' 3", got)
	}
	if len(sh.Refused) != 2 {
		t.Errorf("minutes kept: %v; want the two within the window", sh.Refused)
	}
	if got := sh.RecentRefused(now.Add(9 * time.Minute)); got != 1 {
		t.Errorf("nine minutes on: %d; want only the last minute's 1", got)
	}
	if got := sh.RecentRefused(now.Add(10 * time.Minute)); got != 0 {
		t.Errorf("ten minutes on: %d; want none (the window is the minute and the nine before)", got)
	}
}
