package salvage

import (
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/salvagehq/salvage/consumers/operator"
	"github.com/salvagehq/salvage/kv"
)

// TestPublicViewsShowEveryField: every field of a machinery record is
// shown by its public view or named hidden here — so a field added to
// the machinery cannot silently go missing from what users read — and
// every field shown is copied (each source field filled with a value that
// is not zero must arrive not zero).
func TestPublicViewsShowEveryField(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		src     any
		convert func(any) any
		// hidden are the machinery's fields users do not see, as paths;
		// "derived:<path>" a public field computed, with no source field.
		hidden []string
	}{
		{"Job", kv.Job{}, func(v any) any { return jobOf(v.(kv.Job)) }, []string{"SourceSeq", "Finishes", "Unannounced", "IndexSeq", "TenantIndexSeq", "MetaIndexSeqs", "AttentionIndexed"}},
		{"Chunk", kv.Checkpoint{}, func(v any) any { return chunkOf(v.(kv.Checkpoint)) }, []string{"ClaimRevision", "Snapshots",
			"MsgSeq", "CostMicros", "Counted", "CountedTier1", "CountedRedeliveries", "CountedPromptTokens",
			"CountedCompletionTokens", "CountedCostMicros", "Outputs",
			"Events", "EventsDropped", "AttentionUntil"}}, // the timeline is the trace's (ChunkTrace), not every status page's
		{"EnvelopeRecord", kv.EnvelopeRecord{}, func(v any) any { return envelopeRecordOf(v.(kv.EnvelopeRecord)) },
			[]string{"RecoveringBy", "LeaseUntil", "Alerts", "IndexSeq", "JobIndexSeq"}},
		{"Call", kv.JournalRow{}, func(v any) any { return callOf(v.(kv.JournalRow)) }, []string{"RetryableAfterCompensation",
			"HistoryDropped"}},
		{"EnvelopeDetail", operator.Detail{}, func(v any) any { return detailOf(v.(operator.Detail)) }, []string{
			"Record.RecoveringBy", "Record.LeaseUntil", "Record.Alerts", "Record.IndexSeq", "Record.JobIndexSeq", "Checkpoint.ClaimRevision", "Checkpoint.Snapshots",
			"Checkpoint.MsgSeq", "Checkpoint.CostMicros", "Checkpoint.Counted", "Checkpoint.CountedTier1",
			"Checkpoint.CountedRedeliveries", "Checkpoint.CountedPromptTokens", "Checkpoint.CountedCompletionTokens",
			"Checkpoint.CountedCostMicros", "Checkpoint.Outputs", "Checkpoint.Events", "Checkpoint.EventsDropped", "Checkpoint.AttentionUntil", "Journal.RetryableAfterCompensation",
			"Journal.HistoryDropped",
			// Computed from the records when shown, not copied.
			"derived:Actions"}},
	} {
		src := reflect.New(reflect.TypeOf(tc.src)).Elem()
		fillNonZero(src)
		hidden := map[string]bool{}
		for _, h := range tc.hidden {
			hidden[h] = true
		}
		covers(t, tc.name, "", src, reflect.ValueOf(tc.convert(src.Interface())), hidden)
	}
}

// covers checks that every field of src under path is shown in out (or
// hidden) and arrives filled, descending into structs, pointers and the
// first element of slices that both sides hold as structs of their own.
func covers(t *testing.T, name, path string, src, out reflect.Value, hidden map[string]bool) {
	t.Helper()
	for src.Kind() == reflect.Pointer || src.Kind() == reflect.Slice {
		if src.Kind() == reflect.Pointer {
			src, out = src.Elem(), out.Elem()
		} else {
			src, out = src.Index(0), out.Index(0)
		}
	}
	for i := range src.NumField() {
		f := src.Type().Field(i)
		p := f.Name
		if path != "" {
			p = path + "." + f.Name
		}
		if !f.IsExported() || hidden[p] || (f.Anonymous && f.Type == out.Type()) {
			// Hidden, or the view itself, embedded.
			continue
		}
		shown := out.FieldByName(f.Name)
		switch {
		case !shown.IsValid():
			t.Errorf("%s: the machinery's field %s is neither shown nor named hidden", name, p)
		case shown.IsZero():
			t.Errorf("%s: field %s is shown but not copied", name, p)
		case src.Field(i).Type() != shown.Type() && isRecord(src.Field(i).Type()):
			covers(t, name, p, src.Field(i), shown, hidden)
		}
	}
	for i := range out.NumField() {
		if f := out.Type().Field(i); f.IsExported() && !src.FieldByName(f.Name).IsValid() && !hidden["derived:"+strings.TrimPrefix(path+"."+f.Name, ".")] {
			t.Errorf("%s: the public field %s has no source", name, strings.TrimPrefix(path+"."+f.Name, "."))
		}
	}
}

// isRecord reports whether t holds a struct of fields (through pointers
// and slices) other than a time.
func isRecord(t reflect.Type) bool {
	for t.Kind() == reflect.Pointer || t.Kind() == reflect.Slice {
		t = t.Elem()
	}
	return t.Kind() == reflect.Struct && t != reflect.TypeOf(time.Time{})
}

// fillNonZero sets every settable field of v, recursively, to a value
// that is not zero.
func fillNonZero(v reflect.Value) {
	if v.Type() == reflect.TypeOf(time.Time{}) {
		v.Set(reflect.ValueOf(time.Unix(1, 0)))
		return
	}
	switch v.Kind() {
	case reflect.String:
		v.SetString("x")
	case reflect.Bool:
		v.SetBool(true)
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		v.SetInt(1)
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		v.SetUint(1)
	case reflect.Float32, reflect.Float64:
		v.SetFloat(1)
	case reflect.Pointer:
		v.Set(reflect.New(v.Type().Elem()))
		fillNonZero(v.Elem())
	case reflect.Slice:
		v.Set(reflect.MakeSlice(v.Type(), 1, 1))
		fillNonZero(v.Index(0))
	case reflect.Map:
		m := reflect.MakeMap(v.Type())
		k, e := reflect.New(v.Type().Key()).Elem(), reflect.New(v.Type().Elem()).Elem()
		fillNonZero(k)
		if e.Kind() == reflect.Interface {
			e.Set(reflect.ValueOf("x"))
		} else {
			fillNonZero(e)
		}
		m.SetMapIndex(k, e)
		v.Set(m)
	case reflect.Struct:
		for i := range v.NumField() {
			if v.Type().Field(i).IsExported() {
				fillNonZero(v.Field(i))
			}
		}
	case reflect.Interface:
		v.Set(reflect.ValueOf("x"))
	}
}
