package salvage_test

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"unicode"
)

// TestDocLinksResolve: every relative link in the README, SECURITY.md and
// docs/ names a file that exists and, with a #fragment, a heading in it.
func TestDocLinksResolve(t *testing.T) {
	t.Parallel()
	files := []string{"README.md", "SECURITY.md"}
	docs, _ := filepath.Glob(filepath.Join("docs", "*.md"))
	files = append(files, docs...)
	link := regexp.MustCompile(`\]\(([^)\s]+)\)`)
	for _, file := range files {
		data, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range link.FindAllStringSubmatch(stripCode(string(data)), -1) {
			target := m[1]
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			path, frag, _ := strings.Cut(target, "#")
			dest := file
			if path != "" {
				dest = filepath.Join(filepath.Dir(file), path)
				if _, err := os.Stat(dest); err != nil {
					t.Errorf("%s: link %s: %v", file, target, err)
					continue
				}
			}
			if frag == "" || !strings.HasSuffix(dest, ".md") {
				continue
			}
			body, err := os.ReadFile(dest)
			if err != nil {
				t.Fatal(err)
			}
			if !slugs(string(body))[frag] {
				t.Errorf("%s: link %s: no heading #%s in %s", file, target, frag, dest)
			}
		}
	}
}

// stripCode drops fenced code blocks, whose brackets are not links.
func stripCode(md string) string {
	var out strings.Builder
	in := false
	for line := range strings.SplitSeq(md, "\n") {
		if strings.HasPrefix(line, "```") {
			in = !in
			continue
		}
		if !in {
			out.WriteString(line + "\n")
		}
	}
	return out.String()
}

// slugs are the anchors GitHub gives a document's headings.
func slugs(md string) map[string]bool {
	out := map[string]bool{}
	for line := range strings.SplitSeq(stripCode(md), "\n") {
		if !strings.HasPrefix(line, "#") {
			continue
		}
		title := strings.ToLower(strings.TrimSpace(strings.TrimLeft(line, "#")))
		var b strings.Builder
		for _, r := range title {
			switch {
			case r == ' ':
				b.WriteRune('-')
			case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
				b.WriteRune(r)
			}
		}
		out[b.String()] = true
	}
	return out
}
