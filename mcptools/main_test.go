package mcptools_test

import (
	"testing"

	"github.com/salvagehq/salvage/salvagetest"
)

// TestMain fails the run when a goroutine outlives the tests (other than
// the NATS libraries' own, named in salvagetest.LibraryGoroutines).
func TestMain(m *testing.M) { salvagetest.VerifyNoLeaks(m) }
