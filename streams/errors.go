package streams

import "errors"

var (
	// ErrBadToken is returned when a user-supplied subject token is empty,
	// too long, or contains '.', '*', '>' or whitespace.
	ErrBadToken = errors.New("bad subject token")
	// ErrBadSubject is returned when a subject does not have the shape its
	// stream expects.
	ErrBadSubject = errors.New("bad subject")
)
