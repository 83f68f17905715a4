package kv

import (
	"context"
	"time"

	"github.com/salvagehq/salvage/salvagetype"
	"github.com/salvagehq/salvage/streams"
)

// jobListedExtra is how much longer than its records are kept a job stays
// in listings: its entry in the job index (salvage.index.jobs in
// SALVAGE_INDEX) is written once, when the job is created, to expire
// Retention.Records plus this later. A job still live then is found by
// id, no longer listed.
const jobListedExtra = 14 * 24 * time.Hour

// index writes j's entry and sets its sequence in j.
func (s *Jobs) index(ctx context.Context, j *Job) error {
	keep := salvagetype.RecordsRetentionDefault
	if j.Retention != nil && j.Retention.Records > 0 {
		keep = j.Retention.Records
	}
	seq, err := s.idx.put(ctx, indexJobs, j.ID, keep+jobListedExtra)
	if err != nil {
		return err
	}
	j.IndexSeq = seq
	if j.Tenant != "" {
		if j.TenantIndexSeq, err = s.idx.put(ctx, indexTenantJobs(j.Tenant), j.ID, keep+jobListedExtra); err != nil {
			return err
		}
	}
	j.MetaIndexSeqs = nil
	for _, p := range salvagetype.SearchableMeta(j.Metadata) {
		seq, err := s.idx.put(ctx, indexJobMeta(p.Key, p.Value), j.ID, keep+jobListedExtra)
		if err != nil {
			return err
		}
		j.MetaIndexSeqs = append(j.MetaIndexSeqs, seq)
	}
	return nil
}

// MetaPage is Page over the jobs whose metadata has key = value (one of
// their salvagetype.SearchableMeta pairs), from that pair's own index: a
// job is listed when its record names the entry.
func (s *Jobs) MetaPage(ctx context.Context, key, value string, offset, limit int) (JobPage, error) {
	want := salvagetype.MetaPair{Key: key, Value: value}
	return s.page(ctx, indexJobMeta(key, value), func(j Job) uint64 {
		for i, p := range salvagetype.SearchableMeta(j.Metadata) {
			if p == want && i < len(j.MetaIndexSeqs) {
				return j.MetaIndexSeqs[i]
			}
		}
		return 0
	}, offset, limit)
}

// JobPage is one page of job records, newest first.
type JobPage struct {
	Jobs []Job
	// Total is how many jobs are listed.
	Total int
}

// Page returns the job records at positions [offset, offset+limit),
// newest first, from the job index: O(log n + limit) whatever the bucket
// holds. A page is short by the jobs whose records expired.
func (s *Jobs) Page(ctx context.Context, offset, limit int) (JobPage, error) {
	return s.page(ctx, indexJobs, func(j Job) uint64 { return j.IndexSeq }, offset, limit)
}

// TenantPage is Page over the jobs of tenant only, from its own index: a
// job is listed when its record names the entry (and so the tenant).
func (s *Jobs) TenantPage(ctx context.Context, tenant string, offset, limit int) (JobPage, error) {
	if err := salvagetype.ValidateToken("tenant", tenant); err != nil {
		return JobPage{}, err
	}
	return s.page(ctx, indexTenantJobs(tenant), func(j Job) uint64 {
		if j.Tenant != tenant {
			return 0
		}
		return j.TenantIndexSeq
	}, offset, limit)
}

// page reads a page of the index on subject; seqOf is the sequence of
// the entry a record names there.
func (s *Jobs) page(ctx context.Context, subject string, seqOf func(Job) uint64, offset, limit int) (JobPage, error) {
	x := seqIndex{js: s.js, stream: streams.Index}
	pg, err := x.page(ctx, subject, 0, offset, limit, true)
	if err != nil {
		return JobPage{}, err
	}
	out := JobPage{Total: pg.Total, Jobs: make([]Job, 0, len(pg.Msgs))}
	ids, recs, err := entryRecords[Job](ctx, s.js, BucketJobs, pg.Msgs)
	if err != nil {
		return out, err
	}
	now := s.now()
	for i, m := range pg.Msgs {
		j, ok := recs[ids[i]]
		switch {
		case ok && seqOf(j) == m.Sequence:
			out.Jobs = append(out.Jobs, j)
		case ok && seqOf(j) > m.Sequence, !ok && now.Sub(m.Time) > strayGrace:
			// A second entry of a job whose first creation died, or one
			// whose record expired or never came.
			if err := s.idx.remove(ctx, m.Sequence); err != nil {
				return out, err
			}
		}
	}
	return out, nil
}

// reindex gives a record written before the job index its entry.
func (s *Jobs) reindex(ctx context.Context, id string) error {
	_, _, err := mutateJSONWith(ctx, s.b, id, s.update, func(j *Job, exists bool) error {
		if !exists || j.IndexSeq != 0 {
			return ErrNoChange
		}
		return s.index(ctx, j)
	})
	return err
}
