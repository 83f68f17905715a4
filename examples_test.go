package salvage_test

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestExamplesModule builds and runs the programs in examples/, a module
// of its own that requires this one through a replace, as a user's
// program would: they compile against the public API alone and print
// what their comments promise. The README shows examples/greet and
// docs/pipelines.md examples/checkout, verbatim.
func TestExamplesModule(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("builds two programs")
	}
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command on PATH")
	}
	for _, tt := range []struct {
		dir  string
		want string
	}{
		{"greet", "done\n"},
		{"checkout", "job incomplete: 2 done, 1 dead-lettered\nchunk 3: PARTIAL_EXECUTION, abandoned\npayments: 3 requests, 3 charges, 1 refunded\n"},
	} {
		t.Run(tt.dir, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
			defer cancel()
			cmd := exec.CommandContext(ctx, goBin, "run", "./"+tt.dir)
			cmd.Dir = "examples"
			var stdout, stderr bytes.Buffer
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			if err := cmd.Run(); err != nil {
				t.Fatalf("go run ./%s: %v\n%s", tt.dir, err, stderr.String())
			}
			if stdout.String() != tt.want {
				t.Errorf("go run ./%s printed\n%s\nwant\n%s", tt.dir, stdout.String(), tt.want)
			}
		})
	}

	// The README shows the greet program, and docs/pipelines.md the
	// checkout program, as they are.
	for doc, dir := range map[string]string{"README.md": "greet", filepath.Join("docs", "pipelines.md"): "checkout"} {
		text, err := os.ReadFile(doc)
		if err != nil {
			t.Fatal(err)
		}
		prog, err := os.ReadFile(filepath.Join("examples", dir, "main.go"))
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(text), "```go\n"+string(prog)+"```\n") {
			t.Errorf("%s does not show examples/%s/main.go verbatim", doc, dir)
		}
	}
}
