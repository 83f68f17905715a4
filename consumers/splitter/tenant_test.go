package splitter

import (
	"errors"
	"testing"

	"github.com/salvagehq/salvage/salvagetype"
)

// TestTenantOf: the job message's tenant wins, else the metadata field
// the pipeline names, else none; a tenant that is no token, or a field
// that is no string, is refused.
func TestTenantOf(t *testing.T) {
	given := "acme"
	for _, tc := range []struct {
		msg   salvagetype.JobMsg
		from  string
		want  string
		fails bool
	}{
		{msg: salvagetype.JobMsg{Tenant: given, Metadata: map[string]any{"customer": "other"}}, from: "customer", want: "acme"},
		{msg: salvagetype.JobMsg{Metadata: map[string]any{"customer": "other"}}, from: "customer", want: "other"},
		{msg: salvagetype.JobMsg{Metadata: map[string]any{"customer": "other"}}, want: ""},
		{msg: salvagetype.JobMsg{}, from: "customer", want: ""},
		{msg: salvagetype.JobMsg{Metadata: map[string]any{"customer": 7.0}}, from: "customer", fails: true},
		{msg: salvagetype.JobMsg{Metadata: map[string]any{"customer": "a.b"}}, from: "customer", fails: true},
		{msg: salvagetype.JobMsg{Tenant: "a>"}, fails: true},
	} {
		got, err := tenantOf(tc.msg, tc.from)
		if tc.fails {
			if !errors.Is(err, salvagetype.ErrInvalidToken) {
				t.Errorf("tenantOf(%+v, %q) = %q, %v; want ErrBadToken", tc.msg, tc.from, got, err)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("tenantOf(%+v, %q) = %q, %v; want %q", tc.msg, tc.from, got, err, tc.want)
		}
	}
}
