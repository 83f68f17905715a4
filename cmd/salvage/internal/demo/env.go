// Package demo holds the commands that try Salvage out: the demo (the
// contract-review and orders pipelines on an embedded server, with worker
// processes killed and systems taken down), chaos (the same against the
// ledger of effects) and the model simulator they call.
package demo

import "github.com/salvagehq/salvage/cmd/salvage/internal/operator"

// Env is what the demo's commands share: the operator's environment.
type Env struct {
	*operator.Env
}
