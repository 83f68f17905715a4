package cli_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/salvagehq/salvage/cmd/salvage/internal/operator"
)

// TestErrorsUnderJSONAreJSON: a command run with --json that fails says
// so on stdout as {"error": {"code", "message"}}, with a stable code —
// the service's, for what the service refused — and a non-zero exit;
// without --json the error stays a line on stderr.
func TestErrorsUnderJSONAreJSON(t *testing.T) {
	t.Parallel()
	url, _ := up(t, "--role", "all")
	for _, tc := range []struct {
		args []string
		code string
	}{
		{[]string{"dlq", "show", "01JNOSUCHENVELOPE000000000"}, "unknown_envelope"},
		{[]string{"dlq", "replay", "01JNOSUCHENVELOPE000000000"}, "unknown_envelope"},
		{[]string{"jobs", "--meta", "=x"}, "bad_filter"},
		{[]string{"audit", "--action", "explode"}, "bad_filter"},
		{[]string{"audit", "--job", "a.b"}, "invalid_token"},
	} {
		code, stdout, errOut := run(t, "", append(tc.args, "--json", "--server", url)...)
		var je operator.JSONError
		if code == operator.ExitOK || json.Unmarshal([]byte(stdout), &je) != nil || je.Error.Code != tc.code || je.Error.Message == "" || errOut != "" {
			t.Errorf("salvage %s --json: exit %d, stdout %q, stderr %q; want the error as JSON with code %s", strings.Join(tc.args, " "), code, stdout, errOut, tc.code)
		}
	}
	if code, stdout, errOut := run(t, "", "dlq", "show", "01JNOSUCHENVELOPE000000000", "--server", url); code == operator.ExitOK || stdout != "" || !strings.Contains(errOut, "unknown envelope") {
		t.Errorf("without --json: exit %d, stdout %q, stderr %q", code, stdout, errOut)
	}
}
