package kv_test

import (
	"context"
	"errors"
	"testing"

	"github.com/salvagehq/salvage/kv"
	"github.com/salvagehq/salvage/salvagetest"
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
	if _, err := st.Limits.List(ctx); !errors.Is(err, kv.ErrNoLimits) {
		t.Errorf("listing the limits: %v; want ErrNoLimits", err)
	}
	if _, err := st.Limits.Set(ctx, kv.Limit{Key: "system.crm", RequestsPerMinute: 1}, "ann"); !errors.Is(err, kv.ErrNoLimits) {
		t.Errorf("setting a limit: %v; want ErrNoLimits", err)
	}
	st, err = kv.Provision(ctx, srv.JS, kv.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.Limits.Set(ctx, kv.Limit{Key: "system.crm", RequestsPerMinute: 1}, "ann"); err != nil {
		t.Errorf("after provisioning again: %v", err)
	}
}
