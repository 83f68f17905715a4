package operator

import (
	"testing"

	"go.uber.org/goleak"
)

// No goroutine a test starts may outlive it (submit.go starts some; the
// cli tests run those commands in process, with the same check).
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
