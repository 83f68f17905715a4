package salvage

import (
	"github.com/salvagehq/salvage/kv"
	"github.com/salvagehq/salvage/salvagetype"
	"github.com/salvagehq/salvage/streams"
)

// MaxTokenLen is the longest id Salvage accepts in a subject or key
// token: a pipeline name, job id, envelope id or an id a pipeline uses in
// an idempotency key.
const MaxTokenLen = salvagetype.MaxTokenLen

// ValidateToken checks an id that will stand in a NATS subject and a
// JetStream KV key: 1 to MaxTokenLen bytes of [-_=A-Za-z0-9], so never
// '.', '*', '>', whitespace, '/', '#' or ':'. The error wraps
// ErrInvalidToken and names what and the first offending character. A
// Split uses it on ids from its input before they reach a key.
func ValidateToken(what, tok string) error { return salvagetype.ValidateToken(what, tok) }

// ValidateJobID checks a job id: a valid token that is not a name Salvage
// reserves for its own subjects.
func ValidateJobID(id string) error { return streams.ValidateJobID(id) }

// JobSubject is the subject a job for pipeline is published on,
// salvage.jobs.<pipeline>: what Submit and `nats pub` use.
func JobSubject(pipeline string) string { return streams.Pipeline(pipeline).Subject() }

// StorePartition is the partition (Config.Partitions) whose chunks a
// stream or bucket holds: SALVAGE_CHUNKS and salvage_claims,
// salvage_checkpoints, salvage_journal are partition 0's,
// SALVAGE_CHUNKS_<k> and salvage_claims_<k>, … partition k's. ok is false
// for the streams and buckets every partition shares.
func StorePartition(name string) (k int, ok bool) { return kv.PartitionOfStore(name) }
