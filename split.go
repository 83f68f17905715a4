package salvage

import (
	"encoding/json"
	"fmt"
	"strings"
)

// SplitWhole is a Pipeline.Split that makes the whole input one chunk.
func SplitWhole(in json.RawMessage) ([]json.RawMessage, error) {
	if len(in) == 0 {
		return nil, fmt.Errorf("%w: no input", ErrBadInput)
	}
	return []json.RawMessage{in}, nil
}

// SplitParagraphs is a Pipeline.Split for text: a JSON string, or
// {"text": "..."}, cut at blank lines into paragraphs, each a chunk (a
// JSON string). Empty text is bad input.
func SplitParagraphs(in json.RawMessage) ([]json.RawMessage, error) {
	var text string
	if err := json.Unmarshal(in, &text); err != nil {
		var v struct {
			Text *string `json:"text"`
		}
		if err := json.Unmarshal(in, &v); err != nil || v.Text == nil {
			return nil, fmt.Errorf("%w: want a JSON string or {\"text\": \"...\"}", ErrBadInput)
		}
		text = *v.Text
	}
	var out []json.RawMessage
	for _, p := range strings.Split(strings.ReplaceAll(text, "\r\n", "\n"), "\n\n") {
		if p = strings.TrimSpace(p); p == "" {
			continue
		}
		data, err := json.Marshal(p)
		if err != nil {
			return nil, err
		}
		out = append(out, data)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%w: the text has no paragraphs", ErrBadInput)
	}
	return out, nil
}

// SplitItems is a Pipeline.Split that makes each item of a JSON array, or
// of {"items": [...]}, a chunk. An empty array is bad input.
func SplitItems(in json.RawMessage) ([]json.RawMessage, error) {
	var items []json.RawMessage
	if err := json.Unmarshal(in, &items); err != nil {
		var v struct {
			Items []json.RawMessage `json:"items"`
		}
		if err := json.Unmarshal(in, &v); err != nil || v.Items == nil {
			return nil, fmt.Errorf("%w: want a JSON array or {\"items\": [...]}", ErrBadInput)
		}
		items = v.Items
	}
	if len(items) == 0 {
		return nil, fmt.Errorf("%w: no items", ErrBadInput)
	}
	return items, nil
}
