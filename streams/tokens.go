package streams

import (
	"fmt"
	"strings"
	"unicode"
)

// MaxTokenLen bounds a user-supplied subject token.
const MaxTokenLen = 128

// ValidateToken checks a user-supplied subject token (a pipeline, job id or
// system name). It returns an error wrapping ErrBadToken that names what and
// the offending character when tok is empty, too long, or contains '.', '*',
// '>' or whitespace — any of which would change the subject's meaning.
func ValidateToken(what, tok string) error {
	if tok == "" {
		return fmt.Errorf("%w: %s is empty", ErrBadToken, what)
	}
	if len(tok) > MaxTokenLen {
		return fmt.Errorf("%w: %s is %d bytes, the limit is %d", ErrBadToken, what, len(tok), MaxTokenLen)
	}
	if i := strings.IndexFunc(tok, func(r rune) bool {
		return r == '.' || r == '*' || r == '>' || unicode.IsSpace(r) || unicode.IsControl(r)
	}); i >= 0 {
		return fmt.Errorf("%w: %s %q contains %q", ErrBadToken, what, tok, tok[i:i+1])
	}
	return nil
}

func badSubject(subject, want string) error {
	return fmt.Errorf("%w: %q: %s", ErrBadSubject, subject, want)
}
