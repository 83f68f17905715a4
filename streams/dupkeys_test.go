package streams_test

import (
	"errors"
	"testing"

	"github.com/salvagehq/salvage/streams"
)

func TestCheckDuplicateKeys(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		doc   string
		where string // "" when none
	}{
		{`{"job_id":"a","input":1}`, ""},
		{`{"job_id":"a","input":1,"job_id":"b"}`, `"job_id" in the top level`},
		{`{"input":{"items":[{"id":1,"id":2}]}}`, `"id" in input.items.[]`},
		{`{"input":{"a":1,"b":{"a":2}},"x":[1,{"a":1},{"a":2}]}`, ""},
		{`[{"a":1},{"a":1,"a":2}]`, `"a" in []`},
		{`{"a":"a","b":"a"}`, ""},
		{`not json`, ""},
	} {
		err := streams.CheckDuplicateKeys([]byte(tc.doc))
		switch {
		case tc.where == "" && err != nil:
			t.Errorf("%s: %v", tc.doc, err)
		case tc.where != "" && (!errors.Is(err, streams.ErrDuplicateKey) || err.Error() != "streams: a JSON object names a key twice: "+tc.where):
			t.Errorf("%s: %v; want %s", tc.doc, err, tc.where)
		}
	}
}
