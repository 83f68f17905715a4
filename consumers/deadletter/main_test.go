package deadletter

import (
	"testing"

	"go.uber.org/goleak"
)

// No goroutine a test starts may outlive it.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
