package salvage

import (
	"testing"

	"github.com/salvagehq/salvage/recovery"
)

// TestPublicTypesConvert: the public types that mirror the machinery's
// convert field for field (a field added to one side breaks the build).
// The defaults and status words need no test: the root package defines
// them as the machinery's constants.
func TestPublicTypesConvert(t *testing.T) {
	t.Parallel()
	_ = recovery.AlertRules(AlertRules{})
	_ = RecoveryStats(recovery.RecoveryStats{})
	_ = recovery.CompensationInput(CompensationInput{})
}
