package streams

import "errors"

var (
	// ErrInvalidJob is returned when a job message cannot be submitted: no
	// input, or a job_id that is not a string.
	ErrInvalidJob = errors.New("bad job message")
	// ErrBadSubject is returned when a subject does not have the shape its
	// stream expects.
	ErrBadSubject = errors.New("bad subject")
	// ErrJobExists is returned for a submission under a job id that
	// already names another input (another pipeline or another input;
	// see InputHash): a job id names one input, so it is refused.
	ErrJobExists = errors.New("job id names another input")
)
