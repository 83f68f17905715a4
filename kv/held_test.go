package kv_test

import (
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/salvagehq/salvage/kv"
	"github.com/salvagehq/salvage/salvagetype"
)

// TestClaimsAreListedByHolder: a holder's claims are found by one listing
// of its own keys, never another's; a claim handed back names nobody and
// its dead holder, and the next acquire takes it at once, counting the
// takeover; a listing made again outlives the removal of an older one.
func TestClaimsAreListedByHolder(t *testing.T) {
	t.Parallel()
	st := setup(t)
	ctx := t.Context()
	a1, err := st.Parts()[0].Claims.AcquireAs(ctx, "J1", 1, kv.Claim{ClaimedBy: "a", Delivery: 1, Reply: "r1"}, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	a2, err := st.Parts()[0].Claims.AcquireAs(ctx, "J1", 2, kv.Claim{ClaimedBy: "a", Delivery: 1, Reply: "r2"}, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	b3, err := st.Parts()[0].Claims.AcquireAs(ctx, "J1", 3, kv.Claim{ClaimedBy: "ab", Delivery: 1, Reply: "r3"}, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	revs := map[string]uint64{}
	for _, l := range []kv.Lease{a1, a2, b3} {
		rev, err := st.Parts()[0].Claims.Hold(ctx, l)
		if err != nil {
			t.Fatal(err)
		}
		revs[l.Key] = rev
	}
	keys, err := st.Parts()[0].Claims.HeldBy(ctx, "a")
	slices.Sort(keys)
	if err != nil || !slices.Equal(keys, []string{"J1.1", "J1.2"}) {
		t.Fatalf("claims of a = %v (%v); want J1.1 and J1.2, not ab's", keys, err)
	}
	if _, _, ok := kv.ParseChunkKey(kv.HeldKey("a", "J1", 1)); ok {
		t.Errorf("the listing key %s parses as a chunk key", kv.HeldKey("a", "J1", 1))
	}

	// a dies: its claim on chunk 1 is handed back.
	back, err := st.Parts()[0].Claims.Orphan(ctx, a1)
	if err != nil || back.ClaimedBy != "" || back.From != "a" || back.Takeovers != 1 || back.Live(time.Now()) {
		t.Fatalf("handed back = %+v (%v); want no holder, from a, one takeover", back.Claim, err)
	}
	if _, err := st.Parts()[0].Claims.Orphan(ctx, a1); !errors.Is(err, kv.ErrClaimHeld) {
		t.Errorf("a second hand-back of the same revision: %v; want ErrClaimHeld", err)
	}
	if _, err := st.Parts()[0].Claims.Renew(ctx, a1, time.Minute); !errors.Is(err, kv.ErrClaimLost) {
		t.Errorf("a stalled a renews its handed-back claim: %v; want ErrClaimLost", err)
	}
	c1, err := st.Parts()[0].Claims.AcquireAs(ctx, "J1", 1, kv.Claim{ClaimedBy: "c", Delivery: 2, Reply: "r1b"}, time.Minute)
	if err != nil || c1.TakenFrom != "a" || c1.Takeovers != 1 || c1.From != "" {
		t.Fatalf("acquire after the hand-back = %+v taken from %q (%v); want taken from a at once, one takeover", c1.Claim, c1.TakenFrom, err)
	}

	// a's listing of chunk 2 made again (a later delivery): removing the
	// older one by its revision leaves it.
	again, err := st.Parts()[0].Claims.Hold(ctx, a2)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Parts()[0].Claims.Unhold(ctx, "a", a2.Key, revs[a2.Key]); err != nil {
		t.Fatal(err)
	}
	if keys, _ := st.Parts()[0].Claims.HeldBy(ctx, "a"); !slices.Contains(keys, "J1.2") {
		t.Errorf("claims of a = %v; the listing made again was removed by the older one's removal", keys)
	}
	for key, rev := range map[string]uint64{a1.Key: 0, a2.Key: again} {
		if err := st.Parts()[0].Claims.Unhold(ctx, "a", key, rev); err != nil {
			t.Fatal(err)
		}
	}
	if keys, err := st.Parts()[0].Claims.HeldBy(ctx, "a"); err != nil || len(keys) != 0 {
		t.Errorf("claims of a after unlisting = %v (%v); want none", keys, err)
	}
}

// TestProcessLeaseLapses: a process record is alive for its lease after
// the server stored it, by the server's stamp, and lapsed after.
func TestProcessLeaseLapses(t *testing.T) {
	t.Parallel()
	st := setup(t)
	ctx := t.Context()
	if err := st.Workers.Beat(ctx, kv.WorkerState{Worker: salvagetype.Worker{ID: "p1", LeaseMS: 4000}}); err != nil {
		t.Fatal(err)
	}
	w, err := st.Workers.Get(ctx, "p1")
	if err != nil || w.Written.IsZero() || w.Lease() != 4*time.Second {
		t.Fatalf("record = %+v (%v); want the server's stamp and a 4s lease", w, err)
	}
	if w.Lapsed(w.Written.Add(3 * time.Second)) {
		t.Error("lapsed 3s into a 4s lease")
	}
	if !w.Lapsed(w.Written.Add(5 * time.Second)) {
		t.Error("not lapsed 5s after a 4s lease began")
	}
	ws, err := st.Workers.List(ctx)
	if err != nil || len(ws) != 1 || !ws[0].Written.Equal(w.Written) {
		t.Errorf("list = %+v (%v); want p1 with the server's stamp", ws, err)
	}
	if old := (kv.WorkerState{Worker: salvagetype.Worker{ID: "old"}, Written: w.Written}); old.Lapsed(w.Written.Add(time.Hour)) {
		t.Error("a record without a lease (an older version's) lapsed")
	}
}
