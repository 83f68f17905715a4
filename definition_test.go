package salvage_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/salvagehq/salvage"
	"github.com/salvagehq/salvage/salvagetest"
)

// TestAPoolRunsOneDefinition is the impostor pipeline of issue 33: once a
// pipeline's workers run, a process that defines it otherwise — here one
// agent answering {"ok": true} in place of its stage — is refused at
// start, naming both fingerprints and what differs, and runs nothing. The
// same process started as an upgrade to its fingerprint registers it; the
// old definition is then the one refused.
func TestAPoolRunsOneDefinition(t *testing.T) {
	t.Parallel()
	srv := salvagetest.StartServer(t)
	ctx := context.Background()
	real := words()
	srv.Client(t, &salvage.Config{Pipelines: []*salvage.Pipeline{real}})
	realFP, err := real.Fingerprint()
	if err != nil {
		t.Fatal(err)
	}

	impostor := words()
	impostor.Stages = []salvage.Stage{{Name: "shout", Agents: []salvage.Agent{{Name: "yes", Run: func(context.Context, *salvage.Turn) (any, error) {
		return map[string]bool{"ok": true}, nil
	}}}}}
	impostorFP, err := impostor.Fingerprint()
	if err != nil || impostorFP == realFP {
		t.Fatalf("fingerprints %s and %s (%v)", realFP, impostorFP, err)
	}
	c, err := salvage.NewClient(srv.JS, &salvage.Config{Pipelines: []*salvage.Pipeline{impostor}})
	if err != nil {
		t.Fatal(err)
	}
	err = c.Start(ctx)
	var de *salvage.DefinitionError
	if !errors.Is(err, salvage.ErrDefinitionDiffers) || !errors.As(err, &de) {
		_ = c.Stop(ctx)
		t.Fatalf("the impostor started: %v", err)
	}
	if de.Registered != realFP || de.Ours != impostorFP || !strings.Contains(err.Error(), `+ stage 1 agent "yes"`) || !strings.Contains(err.Error(), `- stage 1 agent "shouter"`) {
		t.Fatalf("the refusal does not say what differs: %v", err)
	}
	if err := c.Stop(ctx); !errors.Is(err, salvage.ErrNotStarted) {
		t.Fatalf("the refused client runs: %v", err)
	}

	// A client that only operates (no worker, no recovery) is not checked.
	srv.Client(t, &salvage.Config{Pipelines: []*salvage.Pipeline{impostor}, Roles: []salvage.Role{salvage.RoleAPI}})

	// An upgrade on purpose.
	srv.Client(t, &salvage.Config{Pipelines: []*salvage.Pipeline{impostor}, Upgrades: []string{impostorFP}})
	ps, err := c.PipelineList(ctx)
	if err != nil || len(ps) != 1 || ps[0].Fingerprint != impostorFP || ps[0].PreviousFingerprint != realFP || len(ps[0].Definition) == 0 {
		t.Fatalf("pipelines after the upgrade: %+v, %v", ps, err)
	}
	old, err := salvage.NewClient(srv.JS, &salvage.Config{Pipelines: []*salvage.Pipeline{words()}})
	if err != nil {
		t.Fatal(err)
	}
	if err := old.Start(ctx); !errors.Is(err, salvage.ErrDefinitionDiffers) {
		_ = old.Stop(ctx)
		t.Fatalf("the old definition after the upgrade: %v", err)
	}
	// Version is part of the definition; tuning is not.
	tuned := words()
	tuned.Concurrency, tuned.MaxDeliver = 9, 7
	if fp, _ := tuned.Fingerprint(); fp != realFP {
		t.Errorf("tuning changed the fingerprint: %s", fp)
	}
	versioned := words()
	versioned.Version = "2"
	if fp, _ := versioned.Fingerprint(); fp == realFP {
		t.Errorf("a new Version kept the fingerprint")
	}
}
