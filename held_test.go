package salvage_test

import (
	"context"
	"encoding/json"
	"errors"
	"strconv"
	"testing"

	"github.com/salvagehq/salvage"
	"github.com/salvagehq/salvage/salvagetest"
	"github.com/salvagehq/salvage/salvagetype"
)

// TestHeldChunksAcrossJobs: the chunks waiting in SALVAGE_HOLD — at a
// breaker, awaiting approval, parked by a pause — are listed across jobs,
// longest waiting first, each saying why, and by system.
func TestHeldChunksAcrossJobs(t *testing.T) {
	t.Parallel()
	srv := salvagetest.StartServer(t)
	c := srv.Client(t, &salvage.Config{Roles: []salvage.Role{salvage.RoleNone}})
	ctx := context.Background()
	if err := c.Provision(ctx); err != nil {
		t.Fatal(err)
	}
	for _, h := range []struct {
		system, job string
		chunk       int
	}{{"crm", "j1", 1}, {"approval", "j2", 3}, {"paused-orders", "j3", 2}, {"crm", "j4", 7}} {
		data, _ := json.Marshal(salvagetype.ChunkMsg{Job: h.job, Chunk: h.chunk, Pipeline: "orders"})
		if _, err := srv.JS.Publish(ctx, "salvage.hold."+h.system+"."+h.job+"."+strconv.Itoa(h.chunk), data); err != nil {
			t.Fatal(err)
		}
	}
	all, err := c.ChunkListHeld(ctx, "", 0)
	if err != nil || len(all) != 4 {
		t.Fatalf("held: %+v, %v", all, err)
	}
	for i, want := range []struct{ job, why string }{{"j1", "held: breaker of crm open, or paced"}, {"j2", "awaiting approval"},
		{"j3", "parked: pipeline orders paused"}, {"j4", "held: breaker of crm open, or paced"}} {
		if all[i].Job != want.job || all[i].Why != want.why || all[i].Pipeline != "orders" || all[i].Since.IsZero() {
			t.Errorf("held %d = %+v, want %+v", i, all[i], want)
		}
	}
	crm, err := c.ChunkListHeld(ctx, "crm", 1)
	if err != nil || len(crm) != 1 || crm[0].Job != "j1" {
		t.Fatalf("held at crm, one: %+v, %v", crm, err)
	}
	if _, err := c.ChunkListHeld(ctx, "a.b", 0); !errors.Is(err, salvage.ErrInvalidToken) {
		t.Errorf("a bad system: %v", err)
	}
	if _, err := c.ChunkListHeld(ctx, "", salvage.HeldLimit+1); !errors.Is(err, salvage.ErrBadFilter) {
		t.Errorf("too many: %v", err)
	}
}
