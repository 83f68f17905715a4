package salvage

// ChatRequest is a model call's input: what an agent passes to Turn.Tool
// for a model tool (chatmodel.New makes one, over HTTP).
type ChatRequest struct {
	// Messages are the conversation; Role is system, user or assistant.
	Messages []Message `json:"messages"`
	// MaxTokens bounds the completion; 0 leaves it to the server.
	MaxTokens int64 `json:"max_tokens,omitempty"`
	// Temperature; nil leaves it to the server.
	Temperature *float64 `json:"temperature,omitempty"`
}

// ChatResponse is a model call's output, recorded in the journal and
// replayed on a resume: a resumed chunk never pays for a completion twice.
type ChatResponse struct {
	Content      string `json:"content"`
	FinishReason string `json:"finish_reason,omitempty"`
	Usage        Usage  `json:"usage"`
}
