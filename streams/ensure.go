package streams

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/salvagehq/salvage/salvagetype"
)

// configKey is the metadata key under which Salvage records, on each
// stream, bucket and durable consumer it provisions, a fingerprint of the
// configuration it asked for. A process that finds the fingerprint it
// would write only reads: it needs no permission to create or update, so
// configuration can be an administrator's step (salvage provision) while
// workers run with users that may not change it.
const configKey = "salvage_config"

// fingerprint is the fingerprint of a configuration: the first 16 hex
// digits of the SHA-256 of its JSON, metadata left out.
func fingerprint(cfg any) string {
	data, _ := json.Marshal(cfg)
	var m map[string]any
	if json.Unmarshal(data, &m) == nil {
		delete(m, "metadata")
		data, _ = json.Marshal(m)
	}
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:8])
}

// stamp returns md with the fingerprint fp under configKey.
func stamp(md map[string]string, fp string) map[string]string {
	out := maps.Clone(md)
	if out == nil {
		out = map[string]string{}
	}
	out[configKey] = fp
	return out
}

// readWait bounds the read that decides whether anything needs changing.
// On nats-server v2.15.2 the information request for an R3 stream that
// another process is creating at that moment went unanswered until the
// caller's deadline (20s in TestConcurrentProvisioningOnACluster), while
// the create itself is answered at once: a read that takes longer than
// this is treated as "not current" and the create goes ahead.
const readWait = 2 * time.Second

// changeWait bounds one request that creates or updates a stream, bucket
// or consumer. A forming cluster can leave such a request unanswered (a
// meta leader elected while it was in flight): it is asked again after
// changeWait instead of waited on until the caller's context ends, which
// took a provisioning process past 90 s on a loaded machine
// (TestConcurrentProvisioningOnACluster). Asking again is safe: a create
// that did land finds the same configuration and updates nothing.
const changeWait = 10 * time.Second

// streamCurrent reports whether stream name exists carrying fingerprint
// fp: provisioned as asked, nothing to change. It only reads, for at most
// two seconds.
func streamCurrent(ctx context.Context, js jetstream.JetStream, name, fp string) bool {
	ctx, cancel := context.WithTimeout(ctx, readWait)
	defer cancel()
	s, err := js.Stream(ctx, name)
	return err == nil && s.CachedInfo().Config.Metadata[configKey] == fp
}

// EnsureStreamOf makes what (a bucket, an object store), held in stream,
// exist as cfg configures it: when the stream carries cfg's fingerprint
// it only reads; otherwise it runs change (a create, or an update) with
// the metadata to give the configuration (the fingerprint, under
// salvage_config). A user that may not change it is refused with
// ErrNeedsProvisioning — unless a second look finds it current after all
// (another process provisioned it in the meantime). Transient errors (a
// cluster still placing peers, a leader election) are retried until ctx
// ends.
func EnsureStreamOf(ctx context.Context, js jetstream.JetStream, what, stream string, cfg any, change func(ctx context.Context, metadata map[string]string) error) error {
	fp := fingerprint(cfg)
	if streamCurrent(ctx, js, stream, fp) {
		return nil
	}
	// A forming or restarting cluster answers "no suitable peers" or not
	// at all for a while: wait that out (within ctx), not a refusal. A
	// request it never answers is asked again after changeWait.
	md := map[string]string{configKey: fp}
	err := retryChange(ctx, js, what, func(ctx context.Context) error { return change(ctx, md) })
	if errors.Is(err, salvagetype.ErrNeedsProvisioning) && streamCurrent(ctx, js, stream, fp) {
		return nil
	}
	return err
}

// EnsureStream makes the stream of cfg exist as configured. When it
// already carries cfg's fingerprint it only reads; otherwise it creates
// it, or updates it when one of that name exists with another
// configuration. It asks to create first: creating a stream that exists
// as configured changes nothing and is answered at once, while on
// nats-server v2.15.2 two processes updating one R3 stream at the same
// moment (what CreateOrUpdateStream does first) left every JetStream API
// request of both unanswered until it timed out.
func EnsureStream(ctx context.Context, js jetstream.JetStream, cfg jetstream.StreamConfig) error {
	return EnsureStreamOf(ctx, js, "stream "+cfg.Name, cfg.Name, cfg, func(ctx context.Context, md map[string]string) error {
		cfg.Metadata = stamp(cfg.Metadata, md[configKey])
		_, err := js.CreateStream(ctx, cfg)
		if errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
			_, err = js.UpdateStream(ctx, cfg)
		}
		return err
	})
}

// EnsureConsumer makes the durable consumer of cfg on stream exist as
// configured (see EnsureStream): it only reads when the consumer carries
// cfg's fingerprint.
func EnsureConsumer(ctx context.Context, js jetstream.JetStream, stream string, cfg jetstream.ConsumerConfig) (jetstream.Consumer, error) {
	fp := fingerprint(cfg)
	current := func() (jetstream.Consumer, bool) {
		rctx, cancel := context.WithTimeout(ctx, readWait)
		defer cancel()
		c, err := js.Consumer(rctx, stream, cfg.Durable)
		return c, err == nil && c.CachedInfo().Config.Metadata[configKey] == fp
	}
	if c, ok := current(); ok {
		return c, nil
	}
	cfg.Metadata = stamp(cfg.Metadata, fp)
	var c jetstream.Consumer
	err := retryChange(ctx, js, "consumer "+cfg.Durable+" on "+stream, func(ctx context.Context) error {
		var err error
		c, err = js.CreateConsumer(ctx, stream, cfg)
		if errors.Is(err, jetstream.ErrConsumerExists) {
			c, err = js.UpdateConsumer(ctx, stream, cfg)
		}
		return err
	})
	if errors.Is(err, salvagetype.ErrNeedsProvisioning) {
		if c, ok := current(); ok {
			return c, nil
		}
	}
	return c, err
}

// retryChange runs change (see runChange) until it succeeds, is refused or
// ctx ends, each attempt within changeWait.
func retryChange(ctx context.Context, js jetstream.JetStream, what string, change func(ctx context.Context) error) error {
	return Retry(ctx, func(ctx context.Context) error {
		ctx, cancel := context.WithTimeout(ctx, changeWait)
		defer cancel()
		return runChange(js, what, func() error { return change(ctx) })
	})
}

// runChange runs change, a request that creates, updates or deletes what
// names, and tells a refusal from a timeout: the server refuses a
// publish it does not permit by an asynchronous error and never answers
// the request, so a change that fails while a new permissions violation
// arrived is this user's refusal, returned as ErrNeedsProvisioning
// (not a transient error to wait out).
func runChange(js jetstream.JetStream, what string, change func() error) error {
	nc := js.Conn()
	before := nc.LastError()
	err := change()
	if err == nil {
		return nil
	}
	if last := nc.LastError(); last != before && errors.Is(last, nats.ErrPermissionViolation) {
		return fmt.Errorf("%s is missing or configured otherwise and this user may not change it: %w (%w)", what, salvagetype.ErrNeedsProvisioning, last)
	}
	return err
}
