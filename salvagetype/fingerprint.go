package salvagetype

// Fingerprint identifies a side effect: the system it touched, the id
// that system gave it, and whether and how it can be undone.
type Fingerprint struct {
	System string `json:"system"`
	// ResourceID is the id the external system gave the effect.
	ResourceID string `json:"resource_id,omitempty"`
	Reversible bool   `json:"reversible"`
	// Compensation names the tool that undoes the effect.
	Compensation string `json:"compensation,omitempty"`
	// CompensationKey is the journal key of the call that undid it, once
	// one ran.
	CompensationKey string `json:"compensation_key,omitempty"`
}
