package salvage

import (
	"go/ast"
	"go/token"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/salvagehq/salvage/salvagetype"
)

// TestStatusWordsAreConstants: outside salvagetype, where each is defined,
// no code spells a status, category or strategy as a string literal: it
// uses the constant, so a word is changed in one place and a typo does
// not compile. Log field names and struct tags are names, not statuses,
// and are not looked at.
func TestStatusWordsAreConstants(t *testing.T) {
	t.Parallel()
	words := map[string]bool{}
	for _, w := range []string{
		string(salvagetype.JobRunning), string(salvagetype.JobPartial), string(salvagetype.JobIncomplete),
		string(salvagetype.ChunkPending), string(salvagetype.ChunkHeld), string(salvagetype.ChunkAwaitingApproval),
		string(salvagetype.ChunkPaused), string(salvagetype.ChunkDeadLettered),
		string(salvagetype.CallInitiated), string(salvagetype.CallSucceeded), string(salvagetype.CallFailed),
		string(salvagetype.CallUnknown), string(salvagetype.CallCancelled), string(salvagetype.CallCompensated),
		string(salvagetype.EnvelopeRecovering), string(salvagetype.EnvelopeResolved), string(salvagetype.EnvelopeSuperseded),
		string(salvagetype.EnvelopeEscalated), string(salvagetype.EnvelopeDeadEnd), string(salvagetype.EnvelopeAbandoned),
		string(salvagetype.BreakerHalfOpen),
		string(salvagetype.CategoryTransientNetwork), string(salvagetype.CategoryExternalSystemDown),
		string(salvagetype.CategoryToolTimeout), string(salvagetype.CategoryPartialExecution),
		string(salvagetype.CategoryCompensationNeeded), string(salvagetype.CategoryBudgetExceeded),
		string(salvagetype.CategoryUnrecoverable),
		string(salvagetype.StrategyResume), string(salvagetype.StrategyCompensateAndRetry),
		string(salvagetype.StrategyCompensateAndAbandon), string(salvagetype.StrategyEscalate),
		string(salvagetype.StrategyDeadEnd), string(salvagetype.StrategyVerify),
	} {
		words[w] = true
	}
	// "done", "open", "closed" and "cancelled" are also everyday words of
	// messages and names; the words above are not.
	var found []string
	files, fset := moduleFiles(t)
	for path, f := range files {
		if strings.HasPrefix(path, "salvagetype"+string(filepath.Separator)) {
			continue
		}
		names := map[*ast.BasicLit]bool{}
		ast.Inspect(f, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.Field:
				if n.Tag != nil {
					names[n.Tag] = true
				}
			case *ast.CallExpr:
				// A log or attribute field's name: .Str("status", ...).
				if sel, ok := n.Fun.(*ast.SelectorExpr); ok && len(n.Args) > 0 && logField[sel.Sel.Name] {
					if lit, ok := n.Args[0].(*ast.BasicLit); ok {
						names[lit] = true
					}
				}
			case *ast.BasicLit:
				if n.Kind != token.STRING || names[n] {
					return true
				}
				if s, err := strconv.Unquote(n.Value); err == nil && words[s] {
					found = append(found, fset.Position(n.Pos()).String()+": "+n.Value)
				}
			}
			return true
		})
	}
	for _, f := range found {
		t.Errorf("a status word spelled as a literal, not its constant: %s", f)
	}
}

// logField are the zerolog and OpenTelemetry methods whose first argument
// names a field.
var logField = map[string]bool{"Str": true, "Int": true, "Int64": true, "Bool": true, "Float64": true, "Strs": true,
	"Dur": true, "Time": true, "Interface": true, "Any": true, "Uint64": true, "Ints": true, "String": true}
