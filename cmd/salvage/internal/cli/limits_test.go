package cli_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/salvagehq/salvage"
	"github.com/salvagehq/salvage/cmd/salvage/internal/cli"
)

// TestLimitsFromTheCLI: `salvage limits set` declares a limit through the
// salvage.api service, `salvage limits` lists it with who set it, a key
// that is not <kind>.<name> and a limit of no bound are refused with what
// is wrong, removing an undeclared key says so, and `salvage limits rm`
// removes it.
func TestLimitsFromTheCLI(t *testing.T) {
	t.Parallel()
	url, _ := up(t, "--role", "api")
	if code, out, errOut := run(t, "", "limits", "set", "system.crm", "--rpm", "60", "--in-flight", "4", "--by", "ann", "--server", url); code != cli.ExitOK ||
		!strings.Contains(out, "limit system.crm set by ann") {
		t.Fatalf("limits set exit %d: %s%s", code, out, errOut)
	}
	code, out, errOut := run(t, "", "limits", "--json", "--server", url)
	var ls []salvage.LimitState
	if code != cli.ExitOK || json.Unmarshal([]byte(out), &ls) != nil || len(ls) != 1 {
		t.Fatalf("limits --json exit %d: %s%s", code, out, errOut)
	}
	if l := ls[0]; l.Key != "system.crm" || l.RequestsPerMinute != 60 || l.InFlight != 4 || l.TokensPerMinute != 0 || l.SetBy != "ann" || l.Holders != 0 {
		t.Errorf("listed %+v; want system.crm at 60 requests a minute and 4 in flight, set by ann, held by nobody", l)
	}
	if code, out, _ := run(t, "", "limits", "--server", url); code != cli.ExitOK || !strings.Contains(out, "system.crm") {
		t.Errorf("limits exit %d: %s", code, out)
	}
	for _, bad := range [][]string{{"system.a.b", "--rpm", "1"}, {"crm", "--rpm", "1"}, {"system.crm"}} {
		if code, _, errOut := run(t, "", append(append([]string{"limits", "set"}, bad...), "--server", url)...); code == cli.ExitOK || !strings.Contains(errOut, "invalid limit") {
			t.Errorf("limits set %v: exit %d, %s; want refused as an invalid limit", bad, code, errOut)
		}
	}
	if code, _, errOut := run(t, "", "limits", "rm", "system.nobody", "--server", url); code == cli.ExitOK || !strings.Contains(errOut, "no limit is declared") {
		t.Errorf("limits rm of an undeclared key: exit %d, %s", code, errOut)
	}
	if code, out, errOut := run(t, "", "limits", "rm", "system.crm", "--server", url); code != cli.ExitOK || !strings.Contains(out, "limit system.crm removed") {
		t.Fatalf("limits rm exit %d: %s%s", code, out, errOut)
	}
	if code, out, _ := run(t, "", "limits", "--json", "--server", url); code != cli.ExitOK || strings.TrimSpace(out) != "[]" {
		t.Errorf("limits after the rm: exit %d, %s; want []", code, out)
	}
}
