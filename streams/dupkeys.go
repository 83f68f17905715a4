package streams

import (
	"bytes"
	"encoding/json"
	"fmt"

	"strings"
)

// CheckDuplicateKeys returns an error wrapping ErrDuplicateKey when an
// object anywhere in data names one key twice, saying where: encoding/json
// would keep the last silently, and which one the sender meant (two
// job_ids, two inputs) is not Salvage's to guess. data that is not JSON is
// no concern of this check (its decoder refuses it). It reads data once.
func CheckDuplicateKeys(data []byte) error {
	type frame struct {
		keys map[string]bool // nil for an array
		name string          // where the container sits in its parent
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var stack []frame
	expectKey, next := false, ""
	valueEnded := func() {
		switch {
		case len(stack) == 0:
		case stack[len(stack)-1].keys != nil:
			expectKey = true
		default:
			next = "[]"
		}
	}
	for {
		tok, err := dec.Token()
		if err != nil {
			return nil // the end, or not JSON: the decoder says so
		}
		switch t := tok.(type) {
		case json.Delim:
			switch t {
			case '{':
				stack = append(stack, frame{keys: map[string]bool{}, name: next})
				expectKey = true
			case '[':
				stack = append(stack, frame{name: next})
				expectKey, next = false, "[]"
			default:
				stack = stack[:len(stack)-1]
				valueEnded()
			}
		case string:
			if !expectKey {
				valueEnded()
				continue
			}
			top := stack[len(stack)-1]
			if top.keys[t] {
				var at []string
				for _, f := range stack {
					if f.name != "" {
						at = append(at, f.name)
					}
				}
				where := "the top level"
				if len(at) > 0 {
					where = strings.Join(at, ".")
				}
				return fmt.Errorf("%w: %q in %s", ErrDuplicateKey, t, where)
			}
			top.keys[t] = true
			expectKey, next = false, t
		default:
			valueEnded()
		}
	}
}
