package salvagetype

import (
	"slices"
	"strconv"
)

// MetaIndexMax bounds the metadata pairs of one job a search finds it
// by: the first this many top-level pairs, by key, whose value is a
// string, a number or a boolean.
const MetaIndexMax = 16

// MetaPair is one metadata key and its value as text (a number as JSON
// writes it, a boolean true or false).
type MetaPair struct{ Key, Value string }

// SearchableMeta are the pairs of meta a job search finds it by, in key
// order: at most MetaIndexMax, each a top-level key whose value is a
// string, a number or a boolean.
func SearchableMeta(meta map[string]any) []MetaPair {
	keys := make([]string, 0, len(meta))
	for k := range meta {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	var out []MetaPair
	for _, k := range keys {
		if len(out) == MetaIndexMax {
			break
		}
		if v, ok := MetaText(meta[k]); ok {
			out = append(out, MetaPair{k, v})
		}
	}
	return out
}

// MetaText is a metadata value as a search matches it, and whether it is
// one a search can match (a string, a number, a boolean).
func MetaText(v any) (string, bool) {
	switch v := v.(type) {
	case string:
		return v, true
	case float64:
		return strconv.FormatFloat(v, 'f', -1, 64), true
	case int:
		return strconv.Itoa(v), true
	case int64:
		return strconv.FormatInt(v, 10), true
	case bool:
		return strconv.FormatBool(v), true
	}
	return "", false
}
