package kv

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/salvagehq/salvage/streams"
)

// Claim is the value of a salvage_claims key: who works on a chunk and
// until when. The lease lives in the value, not in a per-key TTL, because
// KeyValue.Update cannot set one: a renewal moves ExpiresAt forward by CAS,
// and a claim whose ExpiresAt has passed may be stolen by CAS.
type Claim struct {
	ClaimedBy string    `json:"claimed_by"`
	Delivery  uint64    `json:"delivery"`
	ClaimedAt time.Time `json:"claimed_at"`
	ExpiresAt time.Time `json:"expires_at"`
	// Pipeline, Seq and Reply locate the delivery the holder runs: the
	// message at Seq of SALVAGE_CHUNKS, in pipeline's pool, acknowledged
	// through Reply. A survivor takes a chunk whose lease lapsed over
	// with them (TakeOver), without waiting for the server's AckWait.
	Pipeline string `json:"pipeline,omitempty"`
	Seq      uint64 `json:"stream_seq,omitempty"`
	Reply    string `json:"reply,omitempty"`
	// Takeovers counts the times the chunk was handed back from a dead
	// holder (Orphan). Each such handover is a redelivery, so a chunk
	// that kills every worker still ends in the DLQ after MaxDeliver.
	Takeovers int `json:"takeovers,omitempty"`
	// From names the dead holder of a claim handed back by Orphan, which
	// names no holder (ClaimedBy is empty) until the next acquire.
	From string `json:"from,omitempty"`
}

// Lease is a claim together with the key and the revision its holder last
// wrote; every renewal and the release CAS on that revision.
type Lease struct {
	Claim
	Key      string `json:"key"`
	Revision uint64 `json:"revision"`
	// Written is when the server stored Revision: a claim is believed
	// only within one lease of its last write (Believed), whatever
	// ExpiresAt says.
	Written time.Time `json:"-"`
	// Unreadable holds the first bytes of a value that is not a claim
	// (ClaimedBy is then empty: nobody holds the chunk).
	Unreadable string `json:"-"`
	// Replaced says what an acquire took the chunk from when that was
	// not a live claim: a claim that could not be read, or one whose
	// lease its last write could not vouch for. Empty otherwise.
	Replaced string `json:"-"`
	// TakenFrom is set by an acquire that took a claim Orphan handed
	// back: the dead holder it was taken from.
	TakenFrom string `json:"-"`
}

// Believed reports whether l is held at time now by a holder that wrote
// it within lease of wall, the time of day (Written is the server's): a
// claim's ExpiresAt counts only as far as one lease past its last write,
// so a claim written with a far-off expiry (by hand, or by a process
// whose clock runs ahead) holds a chunk one lease at most.
func (l Lease) Believed(now, wall time.Time, lease time.Duration) bool {
	if !l.Live(now) {
		return false
	}
	return l.Written.IsZero() || wall.Before(l.Written.Add(lease))
}

// claimStore is the salvage_claims store.
type claimStore struct {
	b jetstream.KeyValue
	// bucket is b's name: one partition's claims.
	bucket string
	now    func() time.Time
}

// ChunkKey is the key of a chunk in salvage_claims and salvage_checkpoints.
func ChunkKey(job string, chunk int) string { return job + "." + strconv.Itoa(chunk) }

// ParseChunkKey takes a ChunkKey apart; ok is false for any other key.
func ParseChunkKey(key string) (job string, chunk int, ok bool) {
	job, n, found := strings.Cut(key, ".")
	chunk, err := strconv.Atoi(n)
	return job, chunk, found && err == nil && job != "" && chunk > 0
}

// Acquire claims a chunk for worker for ttl. It creates the claim if absent
// and steals it by CAS if its lease has expired. It returns a *HeldError
// (errors.Is ErrClaimHeld) when another live worker holds it, and
// ErrClaimHeld too when a concurrent acquirer won the race. A worker that
// already holds the claim gets it back, renewed (for the same delivery,
// when AcquireAs names one by its Reply).
func (c *claimStore) Acquire(ctx context.Context, job string, chunk int, worker string, delivery uint64, ttl time.Duration) (Lease, error) {
	return c.AcquireAs(ctx, job, chunk, Claim{ClaimedBy: worker, Delivery: delivery}, ttl)
}

// AcquireAs is Acquire with the claim's other fields (Pipeline, Seq,
// Reply) set from want; the takeovers counted so far stay.
func (c *claimStore) AcquireAs(ctx context.Context, job string, chunk int, want Claim, ttl time.Duration) (Lease, error) {
	key := ChunkKey(job, chunk)
	now := c.now()
	claim := want
	worker := want.ClaimedBy
	claim.ClaimedAt, claim.ExpiresAt, claim.Takeovers = now, now.Add(ttl), 0
	rev, err := createJSON(ctx, c.b, key, claim)
	if err == nil {
		return Lease{Claim: claim, Key: key, Revision: rev}, nil
	}
	if !isConflict(err) {
		return Lease{}, fmt.Errorf("kv: claim %s: %w", key, err)
	}
	cur, err := c.Get(ctx, job, chunk)
	if errors.Is(err, ErrNotFound) {
		// Released between our create and our read: let the caller retry
		// with the next delivery rather than loop here.
		return Lease{}, fmt.Errorf("%w: %s released during acquire", ErrClaimHeld, key)
	}
	if err != nil {
		return Lease{}, err
	}
	// The same worker holding it for another delivery (a chunk it took
	// over, redelivered meanwhile) is another holder too.
	other := cur.ClaimedBy != worker || (want.Reply != "" && cur.Reply != "" && cur.Reply != want.Reply)
	if other && cur.Believed(now, time.Now(), ttl) {
		return Lease{}, &HeldError{Holder: cur}
	}
	replaced := ""
	switch {
	case cur.Unreadable != "":
		replaced = fmt.Sprintf("a value that is not a claim (%q)", cur.Unreadable)
	case other && cur.Live(now):
		replaced = fmt.Sprintf("a claim of %s to %s its last write (%s) does not vouch for",
			cur.ClaimedBy, cur.ExpiresAt.UTC().Format(time.RFC3339), cur.Written.UTC().Format(time.RFC3339))
	}
	claim.Takeovers = cur.Takeovers
	rev, err = updateJSON(ctx, c.b, key, claim, cur.Revision)
	if isConflict(err) {
		return Lease{}, fmt.Errorf("%w: %s taken by a concurrent acquirer", ErrClaimHeld, key)
	}
	if err != nil {
		return Lease{}, fmt.Errorf("kv: steal claim %s: %w", key, err)
	}
	l := Lease{Claim: claim, Key: key, Revision: rev, Replaced: replaced}
	if cur.ClaimedBy == "" {
		l.TakenFrom = cur.From
	}
	return l, nil
}

// Steal takes cur, a claim another holder's lease still covers but that
// its caller does not believe (why: its holder's process is gone), for
// want, leased for ttl, by CAS on cur's revision; the takeovers counted
// so far stay. ErrClaimHeld when the claim changed since cur was read.
func (c *claimStore) Steal(ctx context.Context, cur Lease, want Claim, ttl time.Duration, why string) (Lease, error) {
	now := c.now()
	claim := want
	claim.ClaimedAt, claim.ExpiresAt, claim.Takeovers = now, now.Add(ttl), cur.Takeovers
	rev, err := updateJSON(ctx, c.b, cur.Key, claim, cur.Revision)
	if isConflict(err) || errors.Is(err, jetstream.ErrKeyNotFound) {
		return Lease{}, fmt.Errorf("%w: %s changed since it was read", ErrClaimHeld, cur.Key)
	}
	if err != nil {
		return Lease{}, fmt.Errorf("kv: steal claim %s: %w", cur.Key, err)
	}
	return Lease{Claim: claim, Key: cur.Key, Revision: rev, Replaced: why}, nil
}

// Orphan hands cur back to its pool after its holder's process lease
// lapsed (the process died): by CAS on cur's revision the claim names no
// holder, so the next acquire takes it at once, and From names the dead
// one; one more takeover is counted. A holder that was only stalled
// finds its claim gone at its next renewal and stands down (ErrClaimLost).
// ErrClaimHeld when the claim changed since cur was read.
func (c *claimStore) Orphan(ctx context.Context, cur Lease) (Lease, error) {
	claim := cur.Claim
	claim.From, claim.ClaimedBy, claim.ExpiresAt, claim.Takeovers = cur.ClaimedBy, "", c.now(), cur.Takeovers+1
	rev, err := updateJSON(ctx, c.b, cur.Key, claim, cur.Revision)
	if isConflict(err) || errors.Is(err, jetstream.ErrKeyNotFound) {
		return Lease{}, fmt.Errorf("%w: %s taken or released since", ErrClaimHeld, cur.Key)
	}
	if err != nil {
		return Lease{}, fmt.Errorf("kv: hand back claim %s: %w", cur.Key, err)
	}
	return Lease{Claim: claim, Key: cur.Key, Revision: rev}, nil
}

// heldKey is the key under which a holder's claim on a chunk is listed:
// by/<holder>.<job>.<chunk>. A job id holds no '/', so no chunk key is one.
func heldKey(holder, job string, chunk int) string { return heldPrefix(holder) + ChunkKey(job, chunk) }

func heldPrefix(holder string) string { return "by/" + holder + "." }

// Hold lists l under its holder (heldKey), so that when the holder's
// process dies its claims are found by one listing of its own keys
// (HeldBy), not by following every claim of the fleet. A claim acquired
// and not yet listed (a crash between the two writes) is found by
// JetStream's redelivery after AckWait instead.
// It returns the listing's revision, for Unhold.
func (c *claimStore) Hold(ctx context.Context, l Lease) (uint64, error) {
	job, chunk, ok := ParseChunkKey(l.Key)
	if !ok {
		return 0, fmt.Errorf("kv: list claim %q under its holder: not a chunk key", l.Key)
	}
	data, err := json.Marshal(l.Claim)
	if err != nil {
		return 0, err
	}
	key := heldKey(l.ClaimedBy, job, chunk)
	var rev uint64
	err = streams.Retry(ctx, func(ctx context.Context) error {
		var err error
		rev, err = c.b.Put(ctx, key, data)
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("kv: list claim %s under %s: %w", l.Key, l.ClaimedBy, err)
	}
	return rev, nil
}

// Unhold removes holder's listing of the claim on a chunk (its ChunkKey):
// the listing at revision rev (Hold's), so that a later listing of the
// same chunk stays, or whatever is there when rev is 0.
func (c *claimStore) Unhold(ctx context.Context, holder, chunkKey string, rev uint64) error {
	key := heldPrefix(holder) + chunkKey
	var opts []jetstream.KVDeleteOpt
	if rev > 0 {
		opts = append(opts, jetstream.LastRevision(rev))
	}
	err := streams.Retry(ctx, func(ctx context.Context) error {
		return c.b.Delete(ctx, key, opts...)
	})
	if isConflict(err) {
		return nil // listed again since: that listing stays
	}
	if err != nil && !errors.Is(err, jetstream.ErrKeyNotFound) {
		return fmt.Errorf("kv: unlist claim %s of %s: %w", chunkKey, holder, err)
	}
	return nil
}

// HeldBy returns the chunk keys holder's claims are listed under: one
// listing of its own keys, O(the chunks it held).
func (c *claimStore) HeldBy(ctx context.Context, holder string) ([]string, error) {
	lister, err := c.b.ListKeysFiltered(ctx, heldPrefix(holder)+">")
	if err != nil {
		return nil, fmt.Errorf("kv: list the claims of %s: %w", holder, err)
	}
	defer func() { _ = lister.Stop() }()
	var keys []string
	for k := range lister.Keys() {
		keys = append(keys, strings.TrimPrefix(k, heldPrefix(holder)))
	}
	return keys, nil
}

// Renew extends a held lease to now+ttl. It returns ErrClaimLost when the
// lease was stolen (or released) since l was written: the caller is stale.
func (c *claimStore) Renew(ctx context.Context, l Lease, ttl time.Duration) (Lease, error) {
	l.ExpiresAt = c.now().Add(ttl)
	rev, err := updateJSON(ctx, c.b, l.Key, l.Claim, l.Revision)
	if isConflict(err) || errors.Is(err, jetstream.ErrKeyNotFound) {
		return l, fmt.Errorf("%w: %s", ErrClaimLost, l.Key)
	}
	if err != nil {
		return l, fmt.Errorf("kv: renew claim %s: %w", l.Key, err)
	}
	l.Revision = rev
	return l, nil
}

// Reclaim takes back the claim of l's holder, whose renewal lost its CAS,
// when what replaced it is not a claim Salvage writes: a value that is not
// a claim, or one whose ExpiresAt runs past two leases (ttl) from its own
// write. It returns the renewed lease with Replaced saying what it
// replaced, or ErrClaimLost when another holder took the chunk as
// Salvage's holders do (or released it): the caller is stale.
func (c *claimStore) Reclaim(ctx context.Context, l Lease, ttl time.Duration) (Lease, error) {
	cur, err := c.get(ctx, l.Key)
	if errors.Is(err, ErrNotFound) {
		return l, fmt.Errorf("%w: %s released", ErrClaimLost, l.Key)
	}
	if err != nil {
		return l, err
	}
	var replaced string
	switch {
	case cur.Unreadable != "":
		replaced = fmt.Sprintf("a value that is not a claim (%q)", cur.Unreadable)
	case !cur.Written.IsZero() && cur.ExpiresAt.After(cur.Written.Add(2*ttl)):
		replaced = fmt.Sprintf("a claim of %s to %s, written %s: no holder renews that far", cur.ClaimedBy,
			cur.ExpiresAt.UTC().Format(time.RFC3339), cur.Written.UTC().Format(time.RFC3339))
	default:
		return l, fmt.Errorf("%w: %s taken by %s", ErrClaimLost, l.Key, cur.ClaimedBy)
	}
	l.Revision = cur.Revision
	nl, err := c.Renew(ctx, l, ttl)
	if err != nil {
		return nl, err
	}
	nl.Replaced = replaced
	return nl, nil
}

// Release deletes the claim if l is still its latest revision, so a stale
// holder can never release a thief's claim. ErrClaimLost otherwise.
func (c *claimStore) Release(ctx context.Context, l Lease) error {
	err := streams.Retry(ctx, func(ctx context.Context) error {
		return c.b.Delete(ctx, l.Key, jetstream.LastRevision(l.Revision))
	})
	if isConflict(err) {
		return fmt.Errorf("%w: %s", ErrClaimLost, l.Key)
	}
	if err != nil {
		return fmt.Errorf("kv: release claim %s: %w", l.Key, err)
	}
	return nil
}

// Get returns the current claim of a chunk, or ErrNotFound. A value that
// is not a claim comes back with Unreadable set and nobody holding it.
func (c *claimStore) Get(ctx context.Context, job string, chunk int) (Lease, error) {
	return c.get(ctx, ChunkKey(job, chunk))
}

func (c *claimStore) get(ctx context.Context, key string) (Lease, error) {
	var e jetstream.KeyValueEntry
	err := streams.Retry(ctx, func(ctx context.Context) error {
		var err error
		e, err = c.b.Get(ctx, key)
		return err
	})
	if errors.Is(err, jetstream.ErrKeyNotFound) || errors.Is(err, jetstream.ErrKeyDeleted) {
		return Lease{}, fmt.Errorf("%w: %s/%s", ErrNotFound, c.bucket, key)
	}
	if err != nil {
		return Lease{}, fmt.Errorf("kv: get %s/%s: %w", c.bucket, key, err)
	}
	return leaseOf(e), nil
}

// leaseOf reads a salvage_claims entry (a watched one too) as a lease.
func leaseOf(e jetstream.KeyValueEntry) Lease {
	l := Lease{Key: e.Key(), Revision: e.Revision(), Written: e.Created()}
	if err := json.Unmarshal(e.Value(), &l.Claim); err != nil {
		l.Claim, l.Unreadable = Claim{}, streams.Clip(string(e.Value()), 256)
	}
	return l
}

// Live reports whether l is held at time now.
func (l Lease) Live(now time.Time) bool { return l.ClaimedBy != "" && now.Before(l.ExpiresAt) }

// SetClock replaces the store's clock; tests use it to expire leases.
func (c *claimStore) SetClock(now func() time.Time) { c.now = now }
