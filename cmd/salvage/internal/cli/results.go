package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/salvagehq/salvage/streams"
)

// readResults returns the latest finding of each chunk of job, keyed by
// chunk number.
func readResults(ctx context.Context, js jetstream.JetStream, job string) (map[int]json.RawMessage, error) {
	cons, err := js.OrderedConsumer(ctx, streams.Results, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{streams.ResultsForJob(job)},
	})
	if err != nil {
		return nil, fmt.Errorf("read results: %w", err)
	}
	info, err := cons.Info(ctx)
	if err != nil {
		return nil, fmt.Errorf("read results: %w", err)
	}
	out := map[int]json.RawMessage{}
	for left := info.NumPending; left > 0; {
		batch, err := cons.Fetch(int(min(left, 256)), jetstream.FetchMaxWait(2*time.Second))
		if err != nil {
			return nil, fmt.Errorf("read results: %w", err)
		}
		n := 0
		for m := range batch.Messages() {
			n++
			parts := strings.Split(m.Subject(), ".")
			if chunk, err := strconv.Atoi(parts[len(parts)-1]); err == nil {
				out[chunk] = m.Data()
			}
		}
		if n == 0 {
			break
		}
		left -= uint64(n)
	}
	return out, nil
}

// topCategories names the n highest-scored categories.
func topCategories(risk map[string]int, n int) string {
	type kv struct {
		cat   string
		score int
	}
	all := make([]kv, 0, len(risk))
	for c, s := range risk {
		all = append(all, kv{c, s})
	}
	sort.Slice(all, func(i, j int) bool {
		if all[i].score != all[j].score {
			return all[i].score > all[j].score
		}
		return all[i].cat < all[j].cat
	})
	var parts []string
	for _, x := range all[:min(n, len(all))] {
		parts = append(parts, fmt.Sprintf("%s %d", x.cat, x.score))
	}
	return strings.Join(parts, ", ")
}
