package operator

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/spf13/cobra"

	"github.com/salvagehq/salvage"
)

// storeRow is one stream or KV bucket of Salvage's in `salvage storage`.
type storeRow struct {
	Name string `json:"name"`
	// Kind is "stream" or "bucket" (a KV bucket, named without KV_).
	Kind string `json:"kind"`
	// Partition is the partition whose chunks it holds (--partitions);
	// absent for what every partition shares.
	Partition *int   `json:"partition,omitempty"`
	Messages  uint64 `json:"messages"`
	Bytes     uint64 `json:"bytes"`
	// MaxAgeSeconds is how long a message is kept (0: until it is
	// removed); History, for a bucket, the revisions kept per key.
	MaxAgeSeconds float64 `json:"max_age_seconds"`
	History       int64   `json:"history,omitempty"`
	// Retention says a message of it is kept while its job runs or its
	// envelope is open, then expires by a per-message TTL retention sets
	// (the journal, the job, checkpoint and envelope buckets).
	Retention bool `json:"retention,omitempty"`
	// Oldest is the oldest message's time; Expires when it expires
	// (Oldest + MaxAge), when it does.
	Oldest  time.Time `json:"oldest,omitzero"`
	Expires time.Time `json:"expires,omitzero"`
}

func (e *Env) storageCmd() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "storage",
		Short: "Show what Salvage's streams and buckets hold: messages, bytes, how long they keep them, and what expires next",
		Long: `Show every Salvage stream (SALVAGE_*) and KV bucket (salvage_*) on the server: its
messages and bytes, how long it keeps a message (its max age; a bucket's revisions per key),
its oldest message and when that one expires. The journal and the job, checkpoint and envelope
buckets keep what a running job, a held chunk or an open envelope needs for as long as it does;
once a job finished, retention (salvage up --keep-calls, --keep-effects, --keep-records)
removes or expires it by data class: "while live, then by retention". It reads the streams'
state, so it needs a user allowed JetStream stream info (an admin, or the embedded server's
default user).`,
		Args: cobra.NoArgs,
	}
	cmd.RunE = e.withConn("salvage storage", func(ctx context.Context, nc *nats.Conn, _ *salvage.Client) error {
		rows, err := storageOf(ctx, nc)
		if err != nil {
			return err
		}
		if asJSON {
			return e.WriteJSON(rows)
		}
		e.printStorage(rows)
		return nil
	})
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

// ByRetention says a stream keeps a message while the work it belongs to
// is live, then as long as retention's per-message TTL says: no age
// limit, per-message TTLs allowed (the journal, the job, checkpoint and
// envelope buckets).
func ByRetention(cfg jetstream.StreamConfig) bool { return cfg.AllowMsgTTL && cfg.MaxAge == 0 }

// storageOf reads the state of every Salvage stream and bucket, streams
// first, each kind by name.
func storageOf(ctx context.Context, nc *nats.Conn) ([]storeRow, error) {
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, err
	}
	rows := []storeRow{}
	list := js.ListStreams(ctx)
	for info := range list.Info() {
		r := storeRow{Name: info.Config.Name, Kind: "stream", Messages: info.State.Msgs, Bytes: info.State.Bytes,
			MaxAgeSeconds: info.Config.MaxAge.Seconds(), Retention: ByRetention(info.Config)}
		switch {
		case strings.HasPrefix(info.Config.Name, "SALVAGE_"):
		case strings.HasPrefix(info.Config.Name, "KV_salvage_"):
			r.Name, r.Kind, r.History = strings.TrimPrefix(info.Config.Name, "KV_"), "bucket", info.Config.MaxMsgsPerSubject
		default:
			continue
		}
		if k, ok := salvage.StorePartition(info.Config.Name); ok {
			r.Partition = &k
		}
		if info.State.Msgs > 0 {
			r.Oldest = info.State.FirstTime.UTC()
			if info.Config.MaxAge > 0 {
				r.Expires = r.Oldest.Add(info.Config.MaxAge)
			}
		}
		rows = append(rows, r)
	}
	if err := list.Err(); err != nil {
		return nil, fmt.Errorf("list streams: %w", err)
	}
	sort.Slice(rows, func(i, k int) bool {
		if rows[i].Kind != rows[k].Kind {
			return rows[i].Kind == "stream"
		}
		return rows[i].Name < rows[k].Name
	})
	return rows, nil
}

func (e *Env) printStorage(rows []storeRow) {
	tw := Table(e.Stdout)
	fmt.Fprintln(tw, "NAME\tKIND\tPARTITION\tMESSAGES\tBYTES\tKEEPS\tOLDEST\tEXPIRES")
	var msgs, bytes uint64
	for _, r := range rows {
		keeps := "until removed"
		if r.Retention {
			keeps = "while live, then by retention"
		}
		if r.MaxAgeSeconds > 0 {
			keeps = (time.Duration(r.MaxAgeSeconds) * time.Second).String()
			switch d := r.MaxAgeSeconds / 86400; {
			case d == 1:
				keeps = "1 day"
			case d > 1 && d == float64(int(d)):
				keeps = fmt.Sprintf("%d days", int(d))
			}
		}
		if r.History > 0 {
			keeps += fmt.Sprintf(", %d per key", r.History)
		}
		when := func(t time.Time) string {
			if t.IsZero() {
				return "-"
			}
			return t.Local().Format("2006-01-02 15:04")
		}
		part := "-"
		if r.Partition != nil {
			part = strconv.Itoa(*r.Partition)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\t%s\t%s\t%s\n", r.Name, r.Kind, part, r.Messages, sizeText(r.Bytes), keeps, when(r.Oldest), when(r.Expires))
		msgs, bytes = msgs+r.Messages, bytes+r.Bytes
	}
	fmt.Fprintf(tw, "total\t\t\t%d\t%s\t\t\t\n", msgs, sizeText(bytes))
	_ = tw.Flush()
}

// sizeText is n bytes for a person: B, KiB, MiB or GiB.
func sizeText(n uint64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.1f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d B", n)
}
