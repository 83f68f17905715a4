package cli_test

import (
	"bytes"
	"io"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/creack/pty"
	"github.com/salvagehq/salvage/cmd/salvage/internal/demo"
)

// TestDemoDrawsProgressOnATerminal runs `salvage demo` in a pseudo-
// terminal: it draws a live progress line (redrawn in place) and the kill
// as it happens instead of log lines, names the file its logs went to,
// and ends with the report.
func TestDemoDrawsProgressOnATerminal(t *testing.T) {
	t.Parallel()
	cmd := exec.Command(binary, "demo", "--chunks", "3", "--workers", "2")
	demo.DieWithParent(cmd)
	tty, err := pty.StartWithSize(cmd, &pty.Winsize{Rows: 40, Cols: 160})
	if err != nil {
		t.Fatal(err)
	}
	defer tty.Close()
	var out bytes.Buffer
	copied := make(chan struct{})
	go func() { defer close(copied); _, _ = io.Copy(&out, tty) }()
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("demo on a terminal: %v\n%s", err, out.String())
		}
	case <-time.After(3 * time.Minute):
		_ = cmd.Process.Kill()
		t.Fatal("demo did not finish")
	}
	_ = tty.Close()
	<-copied
	s := out.String()
	for _, want := range []string{"logs go to", "\r\x1b[K", "3/3 chunks done", "killed demo-w", "with SIGKILL", "chunks done"} {
		if !strings.Contains(s, want) {
			t.Errorf("the terminal shows no %q:\n%s", want, s)
		}
	}
	if strings.Contains(s, `"level"`) || strings.Contains(s, "INF ") {
		t.Errorf("log lines on the terminal:\n%s", s)
	}
}
