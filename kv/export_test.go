package kv

// What the package's external tests reach that no other package uses.
var (
	Derive            = derive
	NewDerivation     = newDerivation
	HeldKey           = heldKey
	IndexEnvelope     = indexEnvelope
	IndexJobEnvelopes = indexJobEnvelopes
	IndexJobAttention = indexJobAttention
	SnapshotName      = snapshotName
)
