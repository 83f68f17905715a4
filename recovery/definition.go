package recovery

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"sort"
	"strconv"
	"strings"

	"github.com/salvagehq/salvage/salvagetype"
)

// DefinitionLinesMax bounds the lines of a Definition kept to say what
// differs; the fingerprint covers every line.
const DefinitionLinesMax = 200

// Definition describes p as the processes that share its pools must agree
// on it, one line per fact, in a fixed order: its stages (name, optional,
// requiring approval) and their agents (name, subject), its tools (name,
// system, subject, effect: reversible or not, its compensation, how it is
// verified, retryable after compensation) and its Version. Code is not
// described — an agent's Run is a function — so a pipeline whose code
// changes in a way that matters says so in its Version. Tuning (pools,
// limits, retention) is not part of it.
func (p *Plan) Definition() []string {
	lines := []string{"pipeline " + p.Name}
	if p.Version != "" {
		lines = append(lines, "version "+strconv.Quote(p.Version))
	}
	for i, st := range p.Stages {
		l := fmt.Sprintf("stage %d %s", i+1, strconv.Quote(st.Name))
		if st.Optional {
			l += " optional"
		}
		if st.RequiresApproval {
			l += " requires-approval"
		}
		lines = append(lines, l)
		for _, a := range st.Agents {
			l := fmt.Sprintf("stage %d agent %s", i+1, strconv.Quote(a.Name))
			if a.Subject != "" {
				l += " subject " + a.Subject
			}
			lines = append(lines, l)
		}
	}
	if p.Tools != nil {
		names := make([]string, 0, len(p.Tools.m))
		for n := range p.Tools.m {
			names = append(names, n)
		}
		sort.Strings(names)
		for _, n := range names {
			lines = append(lines, toolLine(p.Tools.m[n]))
		}
	}
	return lines
}

func toolLine(t *salvagetype.Tool) string {
	l := "tool " + strconv.Quote(t.Name)
	if t.System != "" {
		l += " system " + t.System
	}
	if t.Subject != "" {
		l += " subject " + t.Subject
	}
	switch e := t.Effect; {
	case e == nil:
		l += " pure"
	case e.Reversible:
		l += " reversible compensation " + strconv.Quote(e.Compensation)
	default:
		l += " irreversible"
	}
	if e := t.Effect; e != nil && e.VerifySubject != "" {
		l += " verify-subject " + e.VerifySubject
	}
	if t.RetryableAfterCompensation {
		l += " retryable-after-compensation"
	}
	return l
}

// Fingerprint is the hash of a Definition: "sha256:" and 16 hex digits
// (64 bits: enough to tell versions of one pipeline apart, short enough
// to type).
func Fingerprint(definition []string) string {
	h := sha256.Sum256([]byte(strings.Join(definition, "\n")))
	return "sha256:" + hex.EncodeToString(h[:8])
}
