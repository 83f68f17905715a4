package kv

import (
	"crypto/sha256"
	"encoding/hex"

	"github.com/salvagehq/salvage/salvagetype"
)

// The subjects of the index stream (streams.Index): entries of the job,
// tenant, envelope and attention indexes this package writes and pages.

// indexEnvelope is where an envelope record in status, of category, has
// its entry (the envelope id) in the envelope index; an empty token is
// written "_".
func indexEnvelope(status salvagetype.EnvelopeStatus, category salvagetype.Category) string {
	return "salvage.index.envelopes." + orAny(string(status)) + "." + orAny(string(category))
}

// indexEnvelopes filters the envelope index by status and category; an
// empty one matches any.
func indexEnvelopes(status salvagetype.EnvelopeStatus, category salvagetype.Category) string {
	return "salvage.index.envelopes." + orStar(string(status)) + "." + orStar(string(category))
}

// indexJobEnvelopes is where an envelope record of job has its entry (the
// envelope id) in the index of one job's envelopes.
func indexJobEnvelopes(job string) string { return "salvage.index.job-envelopes." + orAny(job) }

// indexJobAttention is where a chunk of job that came to need a person
// (failed, parked, or carrying an envelope or an error) has its entry (the
// chunk number) in the index of one job's chunks needing attention.
func indexJobAttention(job string) string { return "salvage.index.job-attention." + orAny(job) }

// indexJobs is where a job record has its entry (the job id) in the job
// index.
const indexJobs = "salvage.index.jobs"

// indexTenantJobs is where a job record of tenant has its entry (the job
// id) in the tenant's job index.
func indexTenantJobs(tenant string) string { return "salvage.index.tenant-jobs." + tenant }

// indexJobMeta is where a job record with metadata key = value has its
// entry (the job id) in the index of that pair: the token is the first
// 128 bits of SHA-256 over key, a zero byte and value (a pair is any
// text; a reader checks the record's metadata, so a collision is only
// an entry skipped).
func indexJobMeta(key, value string) string {
	h := sha256.Sum256([]byte(key + "\x00" + value))
	return "salvage.index.job-meta." + hex.EncodeToString(h[:16])
}

// indexBuilt marks an index built from the records written before it
// existed.
const indexBuilt = "salvage.index.built"

// orAny keeps an empty token a token.
func orAny(s string) string {
	if s == "" {
		return "_"
	}
	return s
}

// orStar is s, or the wildcard "*" when s is empty.
func orStar(s string) string {
	if s == "" {
		return "*"
	}
	return s
}
