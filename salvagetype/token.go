package salvagetype

import (
	"errors"
	"fmt"
	"unicode/utf8"
)

// MaxTokenLen bounds a user-supplied token: a pipeline, job id, agent,
// system, tenant or envelope id.
const MaxTokenLen = 128

// ErrInvalidToken is returned when a user-supplied token (pipeline, job
// id, envelope id, agent, system, tenant) is empty, longer than
// MaxTokenLen, has a byte outside [-_=A-Za-z0-9], or is a reserved job id.
var ErrInvalidToken = errors.New("bad subject token")

// ValidateToken checks a user-supplied token that ends up both in subjects
// and in KV keys. A token is 1 to MaxTokenLen bytes of [-_=A-Za-z0-9]:
// exactly what a NATS subject token and a JetStream KV key both accept
// (no '.', '*', '>', whitespace, '/', '#', ':' or non-ASCII letters). It
// returns an error wrapping ErrInvalidToken that names what and the first
// offending character.
func ValidateToken(what, tok string) error {
	if tok == "" {
		return fmt.Errorf("%w: %s is empty", ErrInvalidToken, what)
	}
	if len(tok) > MaxTokenLen {
		return fmt.Errorf("%w: %s is %d bytes, the limit is %d", ErrInvalidToken, what, len(tok), MaxTokenLen)
	}
	for i := 0; i < len(tok); i++ {
		if !TokenByte(tok[i]) {
			return fmt.Errorf("%w: %s %q contains %q at byte %d (allowed: A-Z a-z 0-9 - _ =)", ErrInvalidToken, what, tok, badRune(tok, i), i)
		}
	}
	return nil
}

// TokenByte reports whether c may appear in a token.
func TokenByte(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '='
}

// badRune is the character starting at byte i, whole even when it is
// multi-byte, for the error message.
func badRune(tok string, i int) string {
	r, _ := utf8.DecodeRuneInString(tok[i:])
	return string(r)
}
