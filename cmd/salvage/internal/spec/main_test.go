package spec_test

import (
	"os"
	"testing"

	"github.com/salvagehq/salvage/salvagetest"
)

// TestMain fails the run when a goroutine outlives the tests (other than
// the NATS libraries' own, named in salvagetest.LibraryGoroutines). Run
// with $SPEC_TEST_MCP_LEDGER set, the test binary is instead the MCP
// server a pipelines file runs as a command (see mcp_test.go).
func TestMain(m *testing.M) {
	if ledger := os.Getenv(mcpLedgerEnv); ledger != "" {
		os.Exit(serveMCPOnStdio(ledger))
	}
	salvagetest.VerifyNoLeaks(m)
}
