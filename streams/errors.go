package streams

import "errors"

var (
	// ErrBadSubject is returned when a subject does not have the shape its
	// stream expects.
	ErrBadSubject = errors.New("bad subject")
	// ErrChunkProof is returned by VerifyChunk when a chunk is not the one its
	// job was split into: no proof where the job has a root, a proof that
	// cannot be read, or one that leads to another root.
	ErrChunkProof = errors.New("streams: chunk does not match what its job was split into")
	// ErrDuplicateKey is returned by CheckDuplicateKeys.
	ErrDuplicateKey = errors.New("streams: a JSON object names a key twice")
	// ErrPartitions reports a partition count out of range.
	ErrPartitions = errors.New("streams: partitions out of range")
)
