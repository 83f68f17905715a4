package streams_test

import (
	"errors"
	"regexp"
	"strings"
	"testing"

	"github.com/salvagehq/salvage/salvagetype"
	"github.com/salvagehq/salvage/streams"
)

var tokenRE = regexp.MustCompile(`^[-_=A-Za-z0-9]+$`)

// FuzzValidateToken: a token ValidateToken accepts has only the bytes a
// subject token and a KV key both allow, and every subject built from it
// parses back to it; anything refused is refused with ErrBadToken.
func FuzzValidateToken(f *testing.F) {
	for _, s := range []string{"contract-review", "01JABCDEF", "a.b", "*", ">", "", " ", "tab\t", "é", "a:b", "x/y", "#", strings.Repeat("a", 300)} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, tok string) {
		err := salvagetype.ValidateToken("token", tok)
		if err != nil {
			if !errors.Is(err, salvagetype.ErrInvalidToken) {
				t.Fatalf("refused %q with %v, not ErrBadToken", tok, err)
			}
			return
		}
		if !tokenRE.MatchString(tok) || len(tok) > salvagetype.MaxTokenLen {
			t.Fatalf("accepted %q", tok)
		}
		if ref, err := streams.ParseChunkSubject(streams.ChunkRef{Pipeline: tok, Job: tok, Chunk: 7}.Subject()); err != nil || ref.Pipeline != tok || ref.Job != tok || ref.Chunk != 7 {
			t.Fatalf("chunk subject of %q parsed as %+v, %v", tok, ref, err)
		}
		if ref, err := streams.ParseHoldSubject(streams.ChunkRef{Job: tok, Chunk: 3}.Hold(tok)); err != nil || ref.System != tok || ref.Job != tok || ref.Chunk != 3 {
			t.Fatalf("hold subject of %q parsed as %+v, %v", tok, ref, err)
		}
		if p, err := streams.ParseJobSubject(streams.Pipeline(tok).Subject()); err != nil || p != tok {
			t.Fatalf("job subject of %q parsed as %q, %v", tok, p, err)
		}
	})
}

// FuzzParseSubjects: whatever subject arrives, a parse that succeeds
// yields valid tokens and a positive chunk, and builds the same subject
// again.
func FuzzParseSubjects(f *testing.F) {
	for _, s := range []string{"salvage.chunks.p.j.1", "salvage.chunks..j.1", "salvage.chunks.p.j.0", "salvage.chunks.p:x.j.1",
		"salvage.hold.crm.j.2", "salvage.hold.crm..2", "salvage.jobs.contract-review", "salvage.jobs.a.b", "salvage.chunks.p.j.+1", "salvage.chunks.p.j.01"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, subject string) {
		if ref, err := streams.ParseChunkSubject(subject); err == nil {
			if salvagetype.ValidateToken("pipeline", ref.Pipeline) != nil || salvagetype.ValidateToken("job", ref.Job) != nil || ref.Chunk < 1 {
				t.Fatalf("%q parsed as %+v", subject, ref)
			}
			if again := ref.Subject(); again != subject {
				t.Fatalf("%q parsed as %+v, which builds %q", subject, ref, again)
			}
		}
		if ref, err := streams.ParseHoldSubject(subject); err == nil {
			if salvagetype.ValidateToken("system", ref.System) != nil || salvagetype.ValidateToken("job", ref.Job) != nil || ref.Chunk < 1 {
				t.Fatalf("%q parsed as %+v", subject, ref)
			}
			if again := ref.Subject(); again != subject {
				t.Fatalf("%q parsed as %+v, which builds %q", subject, ref, again)
			}
		}
		if p, err := streams.ParseJobSubject(subject); err == nil && streams.Pipeline(p).Subject() != subject {
			t.Fatalf("%q parsed as pipeline %q", subject, p)
		}
	})
}

// FuzzParseTraceParent: a traceparent that parses gives a non-zero
// 32-digit lowercase hex trace id that survives a rebuild.
func FuzzParseTraceParent(f *testing.F) {
	for _, s := range []string{streams.NewTraceParent(), "00-00000000000000000000000000000000-0000000000000000-01", "01-x-y-z", "", "00-ABCDEF"} {
		f.Add(s)
	}
	hex := regexp.MustCompile(`^[0-9a-f]{32}$`)
	f.Fuzz(func(t *testing.T, tp string) {
		id, ok := streams.ParseTraceParent(tp)
		if !ok {
			return
		}
		if !hex.MatchString(id) || id == strings.Repeat("0", 32) {
			t.Fatalf("%q gave trace id %q", tp, id)
		}
		if again, ok := streams.ParseTraceParent(streams.TraceParent(id, streams.DeriveSpanID(id))); !ok || again != id {
			t.Fatalf("trace id %q did not survive a rebuild", id)
		}
	})
}
