package streams

import (
	"fmt"
	"slices"
	"unicode/utf8"
)

// MaxTokenLen bounds a user-supplied token: a pipeline, job id, agent,
// system or envelope id.
const MaxTokenLen = 128

// ReservedJobIDs are the words a job id may not be: each is a token of the
// salvage.events.<job>.<kind> namespace (salvage.events.rejected.<reason>
// would read as events of a job named "rejected").
var ReservedJobIDs = []string{"rejected", EventAccepted, EventProgress, EventFinished}

// ValidateToken checks a user-supplied token that ends up both in subjects
// and in KV keys. A token is 1 to MaxTokenLen bytes of [-_=A-Za-z0-9]:
// exactly what a NATS subject token and a JetStream KV key both accept
// (no '.', '*', '>', whitespace, '/', '#', ':' or non-ASCII letters). It
// returns an error wrapping ErrBadToken that names what and the first
// offending character.
func ValidateToken(what, tok string) error {
	if tok == "" {
		return fmt.Errorf("%w: %s is empty", ErrBadToken, what)
	}
	if len(tok) > MaxTokenLen {
		return fmt.Errorf("%w: %s is %d bytes, the limit is %d", ErrBadToken, what, len(tok), MaxTokenLen)
	}
	for i := 0; i < len(tok); i++ {
		if !tokenByte(tok[i]) {
			return fmt.Errorf("%w: %s %q contains %q at byte %d (allowed: A-Z a-z 0-9 - _ =)", ErrBadToken, what, tok, badRune(tok, i), i)
		}
	}
	return nil
}

// ValidateJobID checks a job id: a valid token that is not one of
// ReservedJobIDs.
func ValidateJobID(id string) error {
	if err := ValidateToken("job_id", id); err != nil {
		return err
	}
	if slices.Contains(ReservedJobIDs, id) {
		return fmt.Errorf("%w: job_id %q is reserved (the event subjects use it)", ErrBadToken, id)
	}
	return nil
}

// SafeToken turns s into a valid token: every byte ValidateToken would
// refuse becomes '-', and it is cut to MaxTokenLen. It is for ids built
// from host names; an empty s stays empty (still invalid).
func SafeToken(s string) string {
	b := []byte(s[:min(len(s), MaxTokenLen)])
	for i, c := range b {
		if !tokenByte(c) {
			b[i] = '-'
		}
	}
	return string(b)
}

func tokenByte(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '='
}

// badRune is the character starting at byte i, whole even when it is
// multi-byte, for the error message.
func badRune(tok string, i int) string {
	r, _ := utf8.DecodeRuneInString(tok[i:])
	return string(r)
}

func badSubject(subject, want string) error {
	return fmt.Errorf("%w: %q: %s", ErrBadSubject, subject, want)
}
