package salvagetype

// Header names carried on Salvage messages. A hand replay with the nats
// CLI sets HeaderReplayOf (Salvage-Replay-Of) to the envelope it replays.
const (
	// HeaderMsgID deduplicates a publish within the stream's window.
	HeaderMsgID = "Nats-Msg-Id"
	// HeaderTraceParent carries the job's W3C trace context.
	HeaderTraceParent = "traceparent"
	HeaderJob         = "Salvage-Job"
	HeaderChunk       = "Salvage-Chunk"
	HeaderRecoveryOf  = "Salvage-Recovery-Of"
	HeaderReplayOf    = "Salvage-Replay-Of"
	HeaderReason      = "Salvage-Reason"
	// HeaderApprovedBy, HeaderApprovedStage and HeaderApprovalNote carry
	// an approval on the chunk message it releases: the worker that takes
	// it records the approval in the checkpoint, in the same CAS.
	HeaderApprovedBy    = "Salvage-Approved-By"
	HeaderApprovedStage = "Salvage-Approved-Stage"
	HeaderApprovalNote  = "Salvage-Approval-Note"
	// HeaderEnvelope names the envelope an escalation is about.
	HeaderEnvelope = "Salvage-Envelope"
)
