package operator

import (
	"fmt"
	"sort"
	"strings"
)

// topCategories names the n highest-scored categories.
func topCategories(risk map[string]int, n int) string {
	type kv struct {
		cat   string
		score int
	}
	all := make([]kv, 0, len(risk))
	for c, s := range risk {
		all = append(all, kv{c, s})
	}
	sort.Slice(all, func(i, j int) bool {
		if all[i].score != all[j].score {
			return all[i].score > all[j].score
		}
		return all[i].cat < all[j].cat
	})
	var parts []string
	for _, x := range all[:min(n, len(all))] {
		parts = append(parts, fmt.Sprintf("%s %d", x.cat, x.score))
	}
	return strings.Join(parts, ", ")
}
