package streams

import "errors"

var (

	// ErrBadSubject is returned when a subject does not have the shape its
	// stream expects.
	ErrBadSubject = errors.New("bad subject")
)
