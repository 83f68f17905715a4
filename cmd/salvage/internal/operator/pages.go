package operator

import (
	"context"

	"github.com/salvagehq/salvage"
)

// statusReader reads a page of a job's chunks: a *salvage.Client, or a
// *reader (the service first).
type statusReader interface {
	ChunkList(ctx context.Context, id string, page *salvage.Page) (*salvage.ChunkPage, error)
}

// AllChunks returns every chunk of job, a page of up to 1,000 at a time.
func AllChunks(ctx context.Context, c statusReader, job string) (*salvage.Job, []salvage.Chunk, error) {
	return chunkPages(func(p *salvage.Page) (*salvage.ChunkPage, error) { return c.ChunkList(ctx, job, p) })
}

// allFailing returns the job and every chunk of it that failed or waits,
// a page at a time, dead-lettered first.
func allFailing(ctx context.Context, c *reader, job string) (*salvage.Job, []salvage.Chunk, error) {
	return chunkPages(func(p *salvage.Page) (*salvage.ChunkPage, error) {
		st, err := c.ChunkListFailing(ctx, job, p)
		if err != nil {
			return nil, err
		}
		return &st.ChunkPage, nil
	})
}

// chunkPages reads pages of up to 1,000 chunks until the last.
func chunkPages(read func(*salvage.Page) (*salvage.ChunkPage, error)) (*salvage.Job, []salvage.Chunk, error) {
	page := &salvage.Page{Limit: salvage.PageMax}
	var out []salvage.Chunk
	for {
		st, err := read(page)
		if err != nil {
			return nil, nil, err
		}
		out = append(out, st.Chunks...)
		if st.NextOffset == 0 {
			return &st.Job, out, nil
		}
		page.Offset = st.NextOffset
	}
}

// AllEnvelopes returns every envelope record f matches, a page at a time.
func AllEnvelopes(ctx context.Context, c *salvage.Client, f salvage.EnvelopeFilter) ([]salvage.EnvelopeRecord, error) {
	page := &salvage.Page{Limit: salvage.PageMax}
	var out []salvage.EnvelopeRecord
	for {
		l, err := c.EnvelopeList(ctx, f, page)
		if err != nil {
			return nil, err
		}
		out = append(out, l.Envelopes...)
		if l.NextOffset == 0 {
			return out, nil
		}
		page.Offset = l.NextOffset
	}
}
